# The session runner (io/session_runner.py) over the real team reducer: a ledger double answers the owner's
# requests with core/team.py's `step` and `team_view`, the clock is the test's, and each poll is one
# `round`, so every story below is exact. The runner's trace is a real TraceWriter in a temporary directory.
# The same runner against a real daemon and real panes is tests/test_session_run.py.
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from harness.core import commands as c
from harness.core import session as s
from harness.core.codec import team_view
from harness.core.outcome import Accepted
from harness.core.records import EMPTY_LEDGER, Ledger, Team
from harness.core.redaction import redactor
from harness.core.team import step
from harness.io import session_files
from harness.io import session_runner as runner
from harness.io.client import RemoteError, Unreachable
from harness.io.trace import TraceWriter
from harness.io.trace_files import TraceLine, read_trace

SID = "s1"
START = 1_000_000
LIMITS = s.SessionLimits(reminder_after_ms=10_000, violation_after_ms=5_000)
GH_TOKEN = "tok-" + "z" * 24  # an allowlisted variable's value: redacted wherever it appears


class LedgerDouble:
    """The daemon as the runner's owner calls see it, over core/team.py; members act with their keys."""

    def __init__(self) -> None:
        self.ledger: Ledger = EMPTY_LEDGER
        self.now = START
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.down = False
        self.notes: list[tuple[str, str]] = []  # (recipient, text) of each board note sent
        self.observed: dict[str, str | None] = {}  # agent id -> what the desk last saw of its terminal

    def clock(self) -> int:
        return self.now

    def apply(self, command: Any) -> None:
        outcome = step(self.ledger, command)
        if not isinstance(outcome, Accepted):
            raise RemoteError(outcome.code.value, outcome.detail)
        self.ledger = outcome.state

    @property
    def team(self) -> Team:
        return self.ledger.teams[SID]

    async def call(self, action: str, fields: dict[str, Any]) -> Any:
        if self.down:
            raise Unreachable("no daemon answers")
        self.calls.append((action, fields))
        if action == "create":
            members = tuple(
                c.NewMember(m["id"], m["machineId"], m["agentId"], m["name"], m["role"], f"key-{m['id']}")
                for m in fields["members"]
            )
            self.apply(c.CreateTeam(self.now, fields["id"], fields["name"], members))
        elif action == "ask":
            text, ttl, asker = fields["text"], fields["ttlMs"], fields["from"]
            self.apply(c.Ask(self.now, SID, fields["id"], fields["to"], text, ttl_ms=ttl, from_=asker))
        elif action == "cancel":
            self.apply(c.Cancel(self.now, SID, fields["questionId"], reason=fields["reason"]))
        elif action == "expire":
            self.apply(c.Expire(self.now, SID, fields["questionId"], fields["reason"]))
        elif action == "board":
            command = fields["command"]
            assert command["type"] == "send_note" and command["to"]["kind"] == "member"
            self.notes.append((command["to"]["name"], command["text"]))
            return {"operationId": fields["id"]}
        elif action == "agent_show":
            return {
                "agentId": fields["agentId"],
                "delivery": {"observed": self.observed.get(fields["agentId"])},
            }
        elif action != "get":
            raise AssertionError(f"the runner made an unexpected call {action}")
        return team_view(self.team)

    def ask(self, qid: str, asker: str, to: str) -> None:
        self.apply(c.Ask(self.now, SID, qid, to, f"{to}, which endpoint?", member_key=f"key-{asker}"))

    def reply(self, qid: str, by: str, text: str = "GET /v1/state") -> None:
        self.apply(c.Reply(self.now, SID, qid, text, member_key=f"key-{by}"))

    def cancels(self) -> list[str]:
        return [fields["questionId"] for action, fields in self.calls if action == "cancel"]


def plan(mode: s.Mode = s.Mode.FACILITATE, *participants: str) -> runner.SessionPlan:
    seats = tuple(runner.Seat(name, f"agent-{name}") for name in participants)
    lead = runner.Seat("chair", "agent-chair")
    return runner.SessionPlan(SID, mode, lead, seats, "Find the endpoint.", "m-one", LIMITS)


Story = Callable[[runner.SessionRunner, LedgerDouble, set[str]], Awaitable[None]]


def play(
    tmp_path: Path, session_plan: runner.SessionPlan, story: Story, ledger: LedgerDouble | None = None
) -> list[TraceLine]:
    """Run `story` against a started runner (over `ledger`, a fresh double unless given); the trace it wrote,
    read back."""
    ledger = LedgerDouble() if ledger is None else ledger
    gone: set[str] = set()

    async def alive(name: str) -> bool:
        return name not in gone

    async def main() -> None:
        redacting = redactor({"GH_TOKEN": GH_TOKEN})
        writer = await TraceWriter.open(tmp_path / "trace", redacting, clock=ledger.clock)
        try:
            made = runner.SessionRunner(
                session_plan,
                tmp_path / "home",
                ledger.call,
                writer,
                alive=alive,
                redactor=redacting,
                clock=ledger.clock,
            )
            await made.start()
            await story(made, ledger, gone)
        finally:
            await writer.aclose()

    trio.run(main)
    return list(read_trace(tmp_path / "trace"))


def kinds(lines: list[TraceLine]) -> list[tuple[str, object, object]]:
    return [(line.source, line.event["type"], line.event.get("exchangeId")) for line in lines]


def test_one_reminder_then_a_violation_then_the_asker_is_released(tmp_path: Path) -> None:
    """Seed 004: "On an unanswered owed Ask, the participant injects one synthetic reminder. It then emits
    protocol_violation. It unblocks the asker." """

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.ask("q1", "chair", "ben")
        await made.round()
        for _ in range(3):  # rounds before the reminder is due change nothing
            ledger.now += 3_000
            await made.round()
        assert made._current().reminders == ()
        ledger.now += 1_000  # 10 s after the ask
        await made.round()
        ledger.now += 1_000
        await made.round()  # not due again: still one reminder
        reminders = [e for e in team_view(ledger.team)["exchanges"] if ".reminder." in e["id"]]
        assert [(e["from"], e["to"], e["state"]) for e in reminders] == [("session", "ben", "open")]
        ledger.now += 4_000  # 5 s after the reminder
        await made.round()
        released = ledger.team.exchanges["q1"]
        # Seed 004: "the question ends `expired` with reason `no_answer`, visible, never an invented answer".
        assert (released.state.value, released.reason, released.answer) == ("expired", "no_answer", None)
        [view] = [e for e in team_view(ledger.team)["exchanges"] if e["id"] == "q1"]
        assert (view["state"], view["reason"]) == ("expired", "no_answer")  # what every view shows
        assert ledger.team.exchanges[reminders[0]["id"]].state.value == "cancelled"
        ledger.reply("s1.brief", "chair", "done")
        assert (await made.round()).termination is s.Termination.CONCLUDED
        await made.finish()

    lines = play(tmp_path, plan(s.Mode.FACILITATE, "ann", "ben"), story)
    steps = kinds(lines)
    assert [line.seq for line in lines] == list(range(1, len(lines) + 1))
    assert [k for k in steps if k[1] in ("reminder", "protocol_violation", "asker_released")] == [
        ("orchestrator", "reminder", "q1"),
        ("orchestrator", "protocol_violation", "q1"),
        ("orchestrator", "asker_released", "q1"),
    ]
    violation = next(line.event for line in lines if line.event["type"] == "protocol_violation")
    assert (violation["memberId"], violation["rule"], violation["asker"]) == ("ben", "no_answer", "chair")
    ended = next(e.event for e in lines if kinds([e]) == [("ledger", "question_ended", "q1")])
    assert (ended["exchangeId"], ended["state"], ended["reason"]) == ("q1", "expired", "no_answer")
    [summary] = [line.event for line in lines if line.event["type"] == "summary"]
    assert (summary["termination"], summary["violations"], summary["reminders"]) == ("concluded", ["q1"], 1)


def test_an_answer_in_time_gets_no_reminder(tmp_path: Path) -> None:
    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.ask("q1", "chair", "ann")
        await made.round()
        ledger.now += 9_000
        ledger.reply("q1", "ann")
        await made.round()
        ledger.now += 60_000
        await made.round()
        assert made._current().asks["q1"].state is s.AskState.ANSWERED
        assert (
            made._current().reminders == ()
            and s.next_deadline(made._current(), LIMITS) == START + LIMITS.session_ms
        )

    steps = kinds(play(tmp_path, plan(s.Mode.FACILITATE, "ann"), story))
    assert ("ledger", "reply", "q1") in steps and not [k for k in steps if k[1] == "reminder"]


def test_an_ask_after_the_session_ended_is_refused_and_cancelled(tmp_path: Path) -> None:
    """Spec table session-gate: `ask` in `ended` is a conflict; the ledger question is not left owed."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.reply("s1.brief", "chair", "done")
        assert (await made.round()).termination is s.Termination.CONCLUDED
        ledger.ask("q-late", "ann", "chair")
        await made.finish()
        assert ledger.team.exchanges["q-late"].state.value == "cancelled"

    lines = play(tmp_path, plan(s.Mode.FACILITATE, "ann"), story)
    refused = [line.event for line in lines if line.event["type"] == "tool_refused"]
    assert [(e["exchangeId"], e["memberId"], e["code"]) for e in refused] == [("q-late", "ann", "conflict")]


def test_stop_aborts_and_cancels_every_ask_in_flight_with_its_reason(tmp_path: Path) -> None:
    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.ask("q1", "chair", "ann")
        await made.round()
        runner.request_stop(tmp_path / "home", SID)
        ended = await made.round()
        assert (ended.termination, ended.reason) == (
            s.Termination.STOPPED,
            "abort: stopped by `harness session stop`",
        )
        assert made._current().asks["q1"].state is s.AskState.CANCELLED
        await made.finish()
        ends = {q: (e.state.value, e.reason) for q, e in ledger.team.exchanges.items()}
        assert set(ends.values()) == {("cancelled", "stopped")}, ends  # the brief and intros too

    lines = play(tmp_path, plan(s.Mode.FACILITATE, "ann"), story)
    ended = next(
        line.event
        for line in lines
        if line.event.get("exchangeId") == "q1" and line.event["type"] == "question_ended"
    )
    assert ended["reason"] == "session s1 stopped: abort: stopped by `harness session stop`"
    status = session_files.read_status(tmp_path / "home", SID)
    assert status is not None and (status["state"], status["termination"]) == ("ended", "stopped")


@pytest.mark.parametrize(
    ("mode", "reason"), [(s.Mode.FACILITATE, "concluded"), (s.Mode.DISCUSS, "adjourned")]
)
def test_the_ending_cancels_every_ask_in_flight_with_the_ending_as_its_reason(
    tmp_path: Path, mode: s.Mode, reason: str
) -> None:
    """Seed 004: Conclude / Adjourn / Recess "cancel in-flight asks with a visible reason": the ledger keeps
    the ending on each question it cancelled; an ask answered before the end keeps its answer."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.ask("q1", "chair", "ann")
        ledger.ask("q2", "chair", "ann")
        await made.round()
        ledger.reply("q2", "ann")
        await made.round()
        ledger.reply("s1.brief", "chair", "done")
        await made.round()
        await made.finish()
        q1, q2 = ledger.team.exchanges["q1"], ledger.team.exchanges["q2"]
        assert (q1.state.value, q1.reason, q1.answer) == ("cancelled", reason, None)
        assert (q2.state.value, q2.reason) == ("answered", None)
        assert ledger.team.exchanges["s1.intro.ann"].reason == reason

    play(tmp_path, plan(mode, "ann"), story)


@pytest.mark.parametrize(
    ("mode", "tool", "reason"),
    [
        (s.Mode.FACILITATE, s.Conclude, "concluded"),
        (s.Mode.DISCUSS, s.Adjourn, "adjourned"),
        (s.Mode.DISCUSS, s.Recess, "recessed"),
        (s.Mode.FACILITATE, s.Abort, "stopped"),
    ],
)
def test_the_ledger_reason_of_an_ending_names_it(mode: s.Mode, tool: type[Any], reason: str) -> None:
    started = s.step(None, s.Start(START, SID, mode, "chair", ("ann",)), LIMITS)
    assert isinstance(started, Accepted)
    ended = s.step(started.state, tool(START + 1, "chair"), LIMITS)
    assert isinstance(ended, Accepted) and ended.state.state is s.SessionState.ENDED
    assert runner.ending_reason(ended.state) == reason


def test_an_engine_whose_pane_is_gone_stops_the_session(tmp_path: Path) -> None:
    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.ask("q1", "chair", "ann")
        await made.round()
        gone.add("ann")
        ledger.now += runner.LOOK_EVERY_MS
        ended = await made.round()
        assert (ended.termination, ended.reason) == (
            s.Termination.STOPPED,
            "agent_crashed: ann: its engine's pane is gone",
        )

    play(tmp_path, plan(s.Mode.FACILITATE, "ann"), story)


def test_a_daemon_that_goes_away_stops_the_session_with_its_summary(tmp_path: Path) -> None:
    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.down = True
        assert (await made.run()).reason == "abort: daemon: no daemon answers"

    lines = play(tmp_path, plan(s.Mode.SUPERVISE, "ann"), story)
    assert lines[-1].event["type"] == "summary" and lines[-1].event["termination"] == "stopped"


def reminders_to(ledger: LedgerDouble, name: str) -> list[str]:
    """The ids of the orchestrator's reminder questions to one member, in the ledger's order."""
    exchanges = team_view(ledger.team)["exchanges"]
    return [
        e["id"]
        for e in exchanges
        if e["from"] == runner.ORCHESTRATOR_NAME and e["to"] == name and ".reminder." in e["id"]
    ]


async def run_until_the_lead_concludes(made: runner.SessionRunner, ledger: LedgerDouble) -> s.Session:
    """`run` as the daemon's session keeper runs it, the lead replying to its brief once ben has been
    reminded; within a deadline, so a runner that never ends fails the test instead of hanging it."""

    async def lead_concludes_after_the_reminder() -> None:
        while not reminders_to(ledger, "ben"):
            await trio.sleep(0.01)
        ledger.reply("s1.brief", "chair", "done")

    made._poll = 0.01
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lead_concludes_after_the_reminder)
            ended = await made.run()
            nursery.cancel_scope.cancel()
    return ended


def test_a_participant_cannot_squat_the_id_of_a_reminder_to_abort_the_session(tmp_path: Path) -> None:
    """Review finding (r6): "A participant aborts any session by squatting a reminder's operation/question
    id: reminder ids are predictable (`SID.reminder.N`), so Ann asks a question with id `s1.reminder.1`;
    when the reminder comes due the daemon answers `conflict: operation id ... already used`, `_notice`
    raises RemoteError, and `run()` catches it as ClientError, taking it for "the daemon went away", and
    ends the session `stopped abort`." Ann squats the first three such ids: ben is still reminded, under an
    id no member can name, and the session runs on until its lead concludes it."""
    squatted = [f"{SID}.reminder.{n}" for n in range(1, 4)]

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.ask("q1", "chair", "ben")  # an honest ask ben does not answer in time
        for question_id in squatted:
            ledger.ask(question_id, "ann", "chair")
        await made.round()
        ledger.now += 11_000  # q1's reminder is due (and the chair's, for ann's questions)
        ended = await run_until_the_lead_concludes(made, ledger)
        assert (ended.termination, ended.reason) == (s.Termination.CONCLUDED, "conclude by chair")
        [reminder_id] = reminders_to(ledger, "ben")
        assert reminder_id not in squatted
        assert all(ledger.team.exchanges[q].from_ == "ann" for q in squatted)  # ann's questions stay hers

    lines = play(tmp_path, plan(s.Mode.FACILITATE, "ann", "ben"), story)
    reminded = [e.event for e in lines if e.event["type"] == "reminder" and e.event["exchangeId"] == "q1"]
    assert [(e["memberId"], "refused" in e) for e in reminded] == [("ben", False)]


class RefusingLedger(LedgerDouble):
    """A daemon that answers every owner request, and refuses some with a protocol error."""

    def __init__(self, refuses: Callable[[str, dict[str, Any]], bool]) -> None:
        super().__init__()
        self.refuses = refuses

    async def call(self, action: str, fields: dict[str, Any]) -> Any:
        if self.refuses(action, fields):
            raise RemoteError("bound_exceeded", "team s1 holds 500 exchanges", bound="exchanges")
        return await super().call(action, fields)


def test_a_reminder_the_ledger_refuses_is_traced_and_the_session_goes_on(tmp_path: Path) -> None:
    """Review finding (r6): a RemoteError answer to one orchestrator request "must not be mistaken for a lost
    daemon". A refused reminder is the daemon's answer: traced with its code, and the session goes on (the
    release still follows on time); it is not the `abort: daemon: ...` of a daemon that went away."""
    ledger = RefusingLedger(lambda action, fields: action == "ask" and ".reminder." in fields["id"])

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.ask("q1", "chair", "ben")
        await made.round()
        ledger.now += 10_000
        assert (await made.round()).reminders == ("q1",)
        ledger.now += 5_000
        assert (await made.round()).violations == ("q1",)
        ledger.reply("s1.brief", "chair", "done")
        made._poll = 0
        with trio.fail_after(30):
            ended = await made.run()
        assert (ended.termination, ended.reason) == (s.Termination.CONCLUDED, "conclude by chair")

    lines = play(tmp_path, plan(s.Mode.FACILITATE, "ben"), story, ledger)
    assert not [q for q in ledger.cancels() if ".reminder." in q]  # the refused reminder was never asked
    [reminder] = [line.event for line in lines if line.event["type"] == "reminder"]
    assert (reminder["exchangeId"], reminder["refused"]) == ("q1", "bound_exceeded"), reminder
    assert reminder["detail"] == "team s1 holds 500 exchanges"
    assert [k[1] for k in kinds(lines) if k[1] in ("asker_released", "summary")] == [
        "asker_released",
        "summary",
    ]


def test_a_request_the_daemon_refuses_stops_the_session_saying_so(tmp_path: Path) -> None:
    """Review finding (r6): `run()` "catches it as ClientError, taking it for 'the daemon went away'". A
    refusal the session cannot go on without (here its team's view) stops it with a reason naming the
    refusal, not a daemon gone."""
    ledger = RefusingLedger(lambda action, fields: action == "get")

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ended = await made.run()
        assert (ended.termination, ended.reason) == (
            s.Termination.STOPPED,
            "abort: daemon refused: bound_exceeded: team s1 holds 500 exchanges",
        )

    play(tmp_path, plan(s.Mode.FACILITATE, "ann"), story, ledger)


def test_a_supervise_ask_names_its_one_target_in_the_ledger_only(tmp_path: Path) -> None:
    """Spec section 2: the supervise pair has one possible target, so its Ask takes no `to`; the ledger's
    question still names it."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.ask("q1", "ann", "chair")
        await made.round()
        assert made._current().asks["q1"].to == "chair"

    play(tmp_path, plan(s.Mode.SUPERVISE, "ann"), story)


def test_introductions_teach_each_role_only_its_tools(tmp_path: Path) -> None:
    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        texts = {e.id: e.text for e in ledger.team.exchanges.values()}
        assert (
            "Brief: Find the endpoint." in texts["s1.brief"]
            and "Conclude: reply to question s1.brief" in texts["s1.brief"]
        )
        assert "Brief:" not in texts["s1.intro.ann"] and "Conclude" not in texts["s1.intro.ann"]
        assert "Ask:" in texts["s1.intro.ann"] and "Answer:" in texts["s1.intro.ann"]

    play(tmp_path, plan(s.Mode.FACILITATE, "ann"), story)


@pytest.mark.parametrize("secret", ["sk-ant-api03-" + "a" * 40, "ghp_" + "b" * 36, GH_TOKEN])
def test_a_secret_in_the_leads_conclusion_reaches_neither_the_status_nor_the_trace(
    tmp_path: Path, secret: str
) -> None:
    """The conclusion is the session's own output (`harness session status` shows it): redacted by default,
    like the trace, whether the secret is a credential shape or an allowlisted variable's value."""

    async def story(made: runner.SessionRunner, ledger: LedgerDouble, gone: set[str]) -> None:
        ledger.reply("s1.brief", "chair", f"done; the key was {secret}")
        await made.round()
        await made.finish()

    play(tmp_path, plan(s.Mode.JUDGE), story)
    status = (session_files.session_dir(tmp_path / "home", SID) / session_files.STATUS_FILE).read_bytes()
    traced = b"".join(path.read_bytes() for path in (tmp_path / "trace").glob("trace-*.ndjson"))
    assert secret.encode() not in status and secret.encode() not in traced
    assert b"done; the key was [REDACTED:" in status


class Cut(Exception):
    """The daemon hosting the runner died here."""


class CuttingLedger(LedgerDouble):
    """A ledger whose daemon dies around the first reminder: before the ledger has it, or just after."""

    def __init__(self, when: str) -> None:
        super().__init__()
        self.when = when
        self.armed = True

    async def call(self, action: str, fields: dict[str, Any]) -> Any:
        reminder = self.armed and action == "ask" and ".reminder." in fields["id"]
        if reminder and self.when == "before":
            self.armed = False
            raise Cut
        result = await super().call(action, fields)
        if reminder:
            self.armed = False
            raise Cut
        return result


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_runner_cut_off_after_journaling_a_reminder_resumes_and_reminds_once(
    tmp_path: Path, when: str
) -> None:
    """Persist before act: the tick that owes the reminder is journaled before the reminder is sent, so a
    runner resumed from the journal sends it if the cut came first, and the ledger keeps one if not (the
    reminder's id is the same); the release then happens once."""
    ledger = CuttingLedger(when)
    session_plan = plan(s.Mode.FACILITATE, "ben")

    async def alive(name: str) -> bool:
        return True

    async def hosted() -> tuple[runner.SessionRunner, TraceWriter]:
        writer = await TraceWriter.open(tmp_path / "trace", redactor({}), clock=ledger.clock)
        made = runner.SessionRunner(
            session_plan,
            tmp_path / "home",
            ledger.call,
            writer,
            alive=alive,
            redactor=redactor({}),
            clock=ledger.clock,
        )
        return made, writer

    async def main() -> None:
        first, writer = await hosted()
        await first.start()
        ledger.ask("q1", "chair", "ben")
        await first.round()
        ledger.now += 10_000
        with pytest.raises(Cut):
            await first.round()
        await writer.aclose()
        second, writer = await hosted()
        resumed = await second.resume()
        assert (resumed.reminders, resumed.violations) == (("q1",), ())
        ledger.now += 5_000
        await second.round()
        ledger.reply("s1.brief", "chair", "done")
        assert (await second.round()).termination is s.Termination.CONCLUDED
        await second.finish()
        await writer.aclose()

    trio.run(main)
    exchanges = team_view(ledger.team)["exchanges"]
    assert [(e["from"], e["to"]) for e in exchanges if ".reminder." in e["id"]] == [("session", "ben")]
    released = ledger.team.exchanges["q1"]
    assert (released.state.value, released.reason) == ("expired", "no_answer")
    assert [f["questionId"] for action, f in ledger.calls if action == "expire"] == ["q1"]
    lines = list(read_trace(tmp_path / "trace"))
    assert [line.seq for line in lines] == sorted(line.seq for line in lines)
    steps = [k[1] for k in kinds(lines)]
    assert [k for k in steps if k in ("reminder", "protocol_violation", "asker_released", "summary")] == [
        "reminder",
        "protocol_violation",
        "asker_released",
        "summary",
    ]


def test_a_damaged_journal_is_refused_not_guessed(tmp_path: Path) -> None:
    """A journal line that is not a command (other than a last one cut off by a crash) stops the resumption
    with the line named, rather than resume a different session."""
    directory = session_files.session_dir(tmp_path / "home", SID)
    directory.mkdir(parents=True)
    start = runner.encode_command(s.Start(START, SID, s.Mode.FACILITATE, "chair", ("ben",)))
    tick = runner.encode_command(s.Tick(START + 1))
    assert runner.decode_command(json.loads(json.dumps(start))) == s.Start(
        START, SID, s.Mode.FACILITATE, "chair", ("ben",)
    )
    journal = directory / runner.JOURNAL_FILE
    journal.write_text(json.dumps(start) + "\n" + json.dumps(tick) + '\n{"command": "tick", "a')
    assert runner._read_journal(directory) == [
        s.Start(START, SID, s.Mode.FACILITATE, "chair", ("ben",)),
        s.Tick(START + 1),
    ]
    journal.write_text(json.dumps(start) + '\n{"command": "nope"}\n' + json.dumps(tick) + "\n")
    with pytest.raises(runner.SessionError, match="line 2 is damaged"):
        runner._read_journal(directory)


def test_the_leads_turns_are_its_busy_screens_after_a_rest_and_the_one_past_the_bound_stops_it(
    tmp_path: Path,
) -> None:
    """Issue 21: "Bounded: lead turns". A busy screen however long is one turn; a dialog or a draft inside a
    turn does not end it; the turn past `lead_turns` traces lead_turn_limit and stops the session."""
    ledger = LedgerDouble()
    screens = iter(["idle", "busy", "busy", "dialog", "busy", "settling", "busy", "draft", "idle", "busy"])
    seen: list[str] = []
    bounded = attrs.evolve(plan(s.Mode.FACILITATE, "ann"), limits=s.SessionLimits(lead_turns=2))

    async def alive(name: str) -> bool:
        return True

    async def look(name: str) -> str:
        assert name == "chair"  # only the lead is looked at
        seen.append(next(screens))
        return seen[-1]

    async def main() -> None:
        writer = await TraceWriter.open(tmp_path / "trace", redactor({}), clock=ledger.clock)
        made = runner.SessionRunner(
            bounded,
            tmp_path / "home",
            ledger.call,
            writer,
            alive=alive,
            redactor=redactor({}),
            clock=ledger.clock,
            look=look,
        )
        await made.start()
        counted = []
        while made._current().state is s.SessionState.RUNNING:
            counted.append((await made.round()).lead_turns)
        assert counted == [0, 1, 1, 1, 1, 1, 2, 2, 2, 2]
        await made.finish()
        await writer.aclose()

    trio.run(main)
    assert len(seen) == 10  # no look once the session ended
    events = [line.event for line in read_trace(tmp_path / "trace")]
    [limit] = [e for e in events if e["type"] == "lead_turn_limit"]
    assert (limit["lead"], limit["turns"]) == ("chair", 2)
    [summary] = [e for e in events if e["type"] == "summary"]
    assert (summary["termination"], summary["reason"], summary["leadTurns"]) == (
        "stopped",
        "lead_turn_limit",
        2,
    )


def test_a_runner_state_from_before_drawn_reminder_ids_still_resumes(tmp_path: Path) -> None:
    """runner.json written before reminders' ids were drawn holds no `reminderSecret`: the session in
    progress across the upgrade resumes (one is drawn), keeping the reminders it asked under their old ids."""
    old = {"applied": 3, "seen": {"q1": [True, False]}, "notices": ["s1.brief"],
           "reminderOf": {"q1": "s1.reminder.1"}, "endReasons": {}, "callsClosed": False}  # fmt: skip
    (tmp_path / runner.STATE_FILE).write_text(json.dumps(old))
    saved = runner._read_state(tmp_path)
    assert saved is not None and saved.reminder_of == {"q1": "s1.reminder.1"} and saved.applied == 3
    assert len(saved.reminder_secret) == 64 and int(saved.reminder_secret, 16) >= 0
