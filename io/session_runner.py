# A coordination session as the daemon hosts it (issue 21, spec/session-v1.md; io/session_keeper.py runs it
# with the daemon's own actions): the session's tools are team operations its engines already run (`team
# ask`, `team reply`, `team wait`), so the team ledger stays the transport and the authority, and this runner
# only watches it. Each command the reducer accepts is journaled before its effects, so a daemon restarted
# after a crash resumes the session without repeating a reminder or a release. It forms a team of the lead,
# the participants and one orchestrator member of its own (`session`, no terminal: its notices are the
# session's introductions, the brief and the reminders, each a question the desk delivers like any other),
# feeds what the ledger shows into core/session.py's reducer, and applies the reducer's effects with the
# owner token: a reminder is a question from `session`; a release is the owner's expire with reason
# `no_answer` (the question ends `expired`, visibly, never with an invented answer); an ending session
# cancels its asks in flight with the ending as their reason. Every orchestrator event, and the ledger steps
# of the session's asks, go to the session's own trace.
# The session's own tools (Announce, RollCall, RequestForComment, Acknowledge) have no team operation: an
# engine runs `harness session TOOL`, which leaves one call file in the session's private directory naming
# the tool and the digest of the caller's member key; the runner resolves the caller from its key file (the
# key is the authority, as for a team operation), steps the reducer and writes the result file the command
# waits for. An announcement is delivered as board notes (pulled, never pushed into a terminal).
from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import shlex
import stat
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from harness.core import session as s
from harness.core.bounded_json import JsonRefused, parse_json, parse_own
from harness.core.errors import ErrorCode, Rejected
from harness.core.outcome import Accepted
from harness.core.records import ID_PATTERN
from harness.core.redaction import Redactor
from harness.io import home as homes
from harness.io.client import ClientError, RemoteError
from harness.io.session_files import STATUS_FILE, session_dir
from harness.io.team_delivery import harness_command
from harness.io.trace import TraceWriter, wall_clock_ms
from harness.io.trace_files import LEDGER, ORCHESTRATOR

PLAN_FILE: Final = "plan.json"  # what `harness session run` hands the daemon: the session to host
JOURNAL_FILE: Final = "journal.ndjson"  # the reducer's accepted commands, each durable before its effects
STATE_FILE: Final = "runner.json"  # the runner's own bookkeeping, current as of its last settle
STOP_FILE: Final = "stop"
CALLS_DIR: Final = "calls"  # the session tools' call and result files
CALL_SUFFIX: Final = ".call.json"
RESULT_SUFFIX: Final = ".result.json"
CALL_BYTES: Final = 64_000  # a call file past this is refused unread: the longest text is 8,000 characters
DIGEST: Final = re.compile(r"[0-9a-f]{64}")  # SHA-256, as key_digest spells it
CALL_ID_CHARS: Final = 64  # so a note id `SESSION.announce.ID.N` stays within the board's 128
REMINDER_ID_DIGITS: Final = 32  # 128 bits: `SESSION.reminder.DIGITS` stays within the ledger's 128 characters
ORCHESTRATOR_NAME: Final = "session"  # the member whose questions are the session's own notices
BRIEF_TTL_MS: Final = 24 * 3_600_000  # the ledger's longest question: the brief stays open for the session
NOTICE_TTL_MS: Final = 3_600_000
LOOK_EVERY_MS: Final = 2_000  # how often the engines' panes are looked at (a tmux call each)
# The ledger reason of an ask cancelled by the session's end: the tool that concluded it, or `stopped`.
ENDED_BY: Final[Mapping[str, str]] = {"conclude": "concluded", "adjourn": "adjourned", "recess": "recessed"}
STOPPED: Final = "stopped"

# How each tool is used from a terminal: the team commands an introduction taught, or `harness session` (its
# `{session}` is that command, `{where}` the member's data directory and key file). Every tool has one
# (spec/session-v1.md, table `tool-commands`), so an introduction teaches each tool of the member's role.
TOOL_USAGE: Final[Mapping[s.Tool, str]] = {
    s.Tool.ASK: 'Ask: `ask NAME "QUESTION" --id ID` returns at once; `wait ID` waits for its answer',
    s.Tool.ANSWER: 'Answer: `reply ID "ANSWER"`, always naming the question id you answer',
    s.Tool.ANNOUNCE: "Announce: `{session} announce {sid} 'NOTE' {where}` leaves every other member a board "
    "note (pulled, never pushed; at most {announcements} per session; no reply expected)",
    s.Tool.ROLL_CALL: "RollCall: `{session} rollcall {sid} {where}` shows each member's screen (idle, busy, "
    "draft, dialog, offline), the asks it owes and its last activity",
    s.Tool.REQUEST_FOR_COMMENT: "RequestForComment: `{session} rfc {sid} 'TOPIC' {where}` records an intent "
    "to open a new discussion thread later",
    s.Tool.ACKNOWLEDGE: "Acknowledge: `{session} acknowledge {sid} 'MESSAGE' {where}` posts a brief message "
    "to the discussion thread",
    s.Tool.CONCLUDE: "Conclude: reply to question {brief} with your summary; it ends the session",
    s.Tool.RECESS: "Recess: `{session} recess {sid} 'SUMMARY' {where}` pauses the discussion: it ends the "
    "session (concluded) and cancels every ask still in flight, telling each asker why",
    s.Tool.ADJOURN: "Adjourn: reply to question {brief} with your summary; it ends the session",
}


# The session tools a `harness session` command calls: name -> the tool and whether it carries a text.
CALL_TOOLS: Final[Mapping[str, tuple[s.Tool, bool]]] = {
    "announce": (s.Tool.ANNOUNCE, True),
    "rollcall": (s.Tool.ROLL_CALL, False),
    "rfc": (s.Tool.REQUEST_FOR_COMMENT, True),
    "acknowledge": (s.Tool.ACKNOWLEDGE, True),
    "recess": (s.Tool.RECESS, True),
}
# RollCall's observation of a member's terminal, from what the desk last saw of it (`agent_show`): a screen
# still settling is idle, a composer holding a cut-off notice a draft; nothing seen, or no engine, offline.
OBSERVATIONS: Final[Mapping[str | None, str]] = {
    "idle": "idle",
    "settling": "idle",
    "busy": "busy",
    "draft": "draft",
    "leftover": "draft",
    "dialog": "dialog",
    "offline": "offline",
    None: "offline",
}


# The screens of a lead between turns: its next busy screen is a new turn. A dialog or a draft is neither (a
# permission prompt inside a turn, a person typing), so they leave the count as it is.
RESTING: Final = frozenset({"idle", "settling"})


class SessionError(Exception):
    """The session could not be formed (its team, agents or trace); nothing was left running by it."""


@attrs.frozen
class Seat:
    name: str  # the member's name and id in the session's team
    agent_id: str  # the registered agent whose pane the member's notices go to


@attrs.frozen
class SessionPlan:
    session_id: str  # also the team's id
    mode: s.Mode
    lead: Seat
    participants: tuple[Seat, ...]
    brief: str
    machine_id: str
    limits: s.SessionLimits = s.DEFAULT_SESSION_LIMITS

    @property
    def brief_id(self) -> str:
        return f"{self.session_id}.brief"

    def seats(self) -> tuple[Seat, ...]:
        return (self.lead, *self.participants)


# An owner request to the daemon: (action, fields) -> result; raises harness.io.client.ClientError.
OwnerCall = Callable[[str, dict[str, Any]], Awaitable[Any]]


@attrs.define
class _Seen:
    """What of one ledger exchange was already fed to the session and traced."""

    answered: bool = False
    ended: bool = False


@attrs.frozen
class _Saved:
    """The runner's bookkeeping as of its last settle: what a resumed runner must not do again."""

    applied: int  # the journal's commands whose effects were all applied
    seen: Mapping[str, tuple[bool, bool]]  # exchange id -> (answer seen, end seen)
    notices: tuple[str, ...]
    reminder_of: Mapping[str, str]
    end_reasons: Mapping[str, str]
    calls_closed: bool
    reminder_secret: str

    def view(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "seen": {q: list(flags) for q, flags in self.seen.items()},
            "notices": list(self.notices),
            "reminderOf": dict(self.reminder_of),
            "endReasons": dict(self.end_reasons),
            "callsClosed": self.calls_closed,
            "reminderSecret": self.reminder_secret,
        }


def _read_state(directory: Path) -> _Saved | None:
    try:
        data = parse_own((directory / STATE_FILE).read_text(encoding="utf-8"))
        return _Saved(
            int(data["applied"]),
            {str(q): (bool(a), bool(e)) for q, (a, e) in data["seen"].items()},
            tuple(str(q) for q in data["notices"]),
            {str(q): str(r) for q, r in data["reminderOf"].items()},
            {str(q): str(r) for q, r in data["endReasons"].items()},
            bool(data["callsClosed"]),
            # A runner.json written before reminders' ids were drawn has none: draw one (a reminder asked
            # already is in reminderOf under its old id, and a question is reminded once).
            str(data.get("reminderSecret") or secrets.token_hex(32)),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise SessionError(f"{directory / STATE_FILE} is damaged: {error!r}") from None


# --- the journal: one JSON line per accepted command -------------------------------------------------------

_COMMANDS: Final[Mapping[str, type[s.SessionCommand]]] = {
    name: kind for kind, name in s.COMMAND_NAMES.items()
}


def encode_command(command: s.SessionCommand) -> dict[str, Any]:
    return {"command": s.COMMAND_NAMES[type(command)], **attrs.asdict(command)}


def decode_command(data: dict[str, Any]) -> s.SessionCommand:
    fields: dict[str, Any] = {key: tuple(v) if isinstance(v, list) else v for key, v in data.items()}
    kind = _COMMANDS[fields.pop("command")]
    if kind is s.Start:
        fields["mode"] = s.Mode(fields["mode"])
    return kind(**fields)


def _append_journal(directory: Path, record: dict[str, Any]) -> None:
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    fd = os.open(directory / JOURNAL_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _reset_journal(directory: Path) -> None:
    (directory / JOURNAL_FILE).unlink(missing_ok=True)
    (directory / STATE_FILE).unlink(missing_ok=True)


def _read_journal(directory: Path) -> list[s.SessionCommand]:
    """The journaled commands, in order. A last line cut off by a crash was never acted on: it is dropped."""
    try:
        raw = (directory / JOURNAL_FILE).read_bytes()
    except FileNotFoundError:
        return []
    lines = raw.split(b"\n")
    commands = []
    for n, line in enumerate(lines):
        try:
            commands.append(decode_command(parse_own(line)))
        except (ValueError, KeyError, TypeError) as error:
            if n >= len(lines) - 1:  # the torn tail of the last append (or the empty rest after it)
                break
            raise SessionError(f"{directory / JOURNAL_FILE} line {n + 1} is damaged: {error!r}") from None
    return commands


class SessionRunner:
    """Runs one session to its end: `start`, then `round` until it ends, then `finish` (or `run` for all).
    All calls in one trio run; `call` talks to the daemon as the owner."""

    def __init__(
        self,
        plan: SessionPlan,
        home: Path,
        call: OwnerCall,
        trace: TraceWriter,
        *,
        alive: Callable[[str], Awaitable[bool]],
        redactor: Redactor,
        clock: Callable[[], int] = wall_clock_ms,
        poll_seconds: float = 0.25,
        look: Callable[[str], Awaitable[str]] | None = None,
    ) -> None:
        self.plan = plan
        self.home = home
        self._call = call
        self._trace = trace
        self._clock = clock
        self._poll = poll_seconds
        self._alive = alive  # member name -> whether its engine still runs in its pane
        # member name -> what its terminal shows now (idle, busy, ...): the lead's turns are counted from it.
        # Only the daemon that hosts the session can look (its desk's terminals); a runner without it counts
        # no turn.
        self._look = look
        self._lead_seen: str | None = None  # the lead's screen at the last look
        self._lead_rested = True  # seen not busy since the last turn it was counted for
        self._redactor = redactor  # the status is the session's output too: a conclusion may quote a secret
        self._next_look = 0
        self.session: s.Session | None = None
        self._seen: dict[str, _Seen] = {}
        self._notices: list[str] = []  # the orchestrator's own questions, cancelled when the session ends
        self._reminder_of: dict[str, str] = {}  # session question id -> its reminder's question id
        self._end_reasons: dict[str, str] = {}  # question id -> why this runner ended it
        self._calls_closed = False  # set once no call file will be answered any more
        # What a reminder's question id is drawn from: a member can neither predict one nor take it first
        # (a question of its own under that id would make the ledger refuse the reminder). Kept with the
        # bookkeeping, so a resumed runner asks a reminder it may have asked already under the same id.
        self._reminder_secret = secrets.token_hex(32)
        self._journaled = 0  # commands in the journal; each one's effects are applied by the next settle

    @property
    def directory(self) -> Path:
        return session_dir(self.home, self.plan.session_id)

    async def run(self) -> s.Session:
        """Form the session (unless `start` did), drive it until it ends, and return it ended."""
        session = self.session or await self.start()
        try:
            while session.state is s.SessionState.RUNNING:
                await trio.sleep(self._poll)
                session = await self.round()
            await self.finish()
        except ClientError as error:
            # The daemon went away, or refused a request the session cannot go on without (its team's view,
            # a release): either way the session ends, its ending traced and not applied, and the reason says
            # which. A refused reminder is no such request (`_remind`).
            why = (
                f"daemon refused: {error.code}: {error.detail}"
                if isinstance(error, RemoteError)
                else f"daemon: {error.detail}"
            )
            outcome = await self._accept(s.Abort(self._clock(), why))
            if isinstance(outcome, Accepted):  # refused only when the session had ended already
                for effect in outcome.effects:
                    if isinstance(effect, s.TraceEvent):
                        self._trace.emit(ORCHESTRATOR, trace_event(effect))
            await self._settle()
        return self._current()

    async def round(self) -> s.Session:
        """One poll: what the ledger shows, the session tools called, a stop request, the engines' panes, the
        clock."""
        await self._observe()
        await self._tool_calls()
        if (self.directory / STOP_FILE).exists():
            await self._step(s.Abort(self._clock(), "stopped by `harness session stop`"))
        await self._lead_turn()
        if self._clock() >= self._next_look:
            self._next_look = self._clock() + LOOK_EVERY_MS
            for seat in self.plan.seats():
                if self._current().state is s.SessionState.RUNNING and not await self._alive(seat.name):
                    await self._step(s.AgentCrashed(self._clock(), seat.name, "its engine's pane is gone"))
        due = s.next_deadline(self._current(), self.plan.limits)
        now = self._clock()
        if due is not None and now >= due:
            await self._step(s.Tick(now))
        await self._settle()
        return self._current()

    async def _lead_turn(self) -> None:
        """A lead seen busy after it was seen at rest took a turn: the reducer counts it, and stops the
        session past its `lead_turns` (tracing `lead_turn_limit`). A busy screen is one turn however long."""
        if self._look is None or self._current().state is not s.SessionState.RUNNING:
            return
        seen = self._lead_seen = await self._look(self.plan.lead.name)
        if seen == "busy" and self._lead_rested:
            self._lead_rested = False
            await self._step(s.TurnStarted(self._clock(), self.plan.lead.name))
        elif seen in RESTING:
            self._lead_rested = True

    async def finish(self) -> None:
        """After the end: withdraw the session's own notices still open, and trace how its questions ended."""
        session = self._current()
        for question_id in self._notices:
            why = f"session {session.id} {session.termination}"
            await self._end_question("cancel", question_id, why, ending_reason(session))
        await self._observe()
        await self._tool_calls()  # the calls left before the end are answered (refused, or a roll call)
        self._calls_closed = True
        await self._settle()

    def _current(self) -> s.Session:
        assert self.session is not None
        return self.session

    # --- forming the session --------------------------------------------------------------------------------

    async def start(self) -> s.Session:
        """Form the session: its trace's first events, its team, and each member's introduction."""
        plan = self.plan
        self.directory.mkdir(parents=True, exist_ok=True, mode=homes.PRIVATE_DIR_MODE)
        (self.directory / CALLS_DIR).mkdir(exist_ok=True, mode=homes.PRIVATE_DIR_MODE)
        (self.directory / STOP_FILE).unlink(missing_ok=True)
        start = s.Start(
            self._clock(),
            plan.session_id,
            plan.mode,
            plan.lead.name,
            tuple(p.name for p in plan.participants),
        )
        await trio.to_thread.run_sync(_reset_journal, self.directory)
        outcome = await self._accept(start)
        if not isinstance(outcome, Accepted):
            raise SessionError(f"{outcome.code}: {outcome.detail}")
        members = [
            {
                "id": seat.name,
                "machineId": plan.machine_id,
                "agentId": seat.agent_id,
                "name": seat.name,
                "role": str(outcome.state.members[seat.name].role),
            }
            for seat in plan.seats()
        ]
        orchestrator = {
            "id": ORCHESTRATOR_NAME,
            "machineId": plan.machine_id,
            "agentId": f"{ORCHESTRATOR_NAME}-{plan.session_id}",
            "name": ORCHESTRATOR_NAME,
            "role": f"the {plan.mode} session's orchestrator (harness); it sends briefs and reminders",
        }
        await self._call(
            "create",
            {
                "id": plan.session_id,
                "name": f"session {plan.session_id}",
                "members": [*members, orchestrator],
            },
        )
        await self._apply(outcome.effects)
        for seat in plan.seats():
            text = introduction(
                plan, outcome.state, seat.name, session_options(self.home, plan.session_id, seat)
            )
            await self._notice(seat.name, self._introduction_id(seat), text)
        await self._settle()
        return outcome.state

    def _introduction_id(self, seat: Seat) -> str:
        return self.plan.brief_id if seat == self.plan.lead else f"{self.plan.session_id}.intro.{seat.name}"

    async def _notice(self, to: str, question_id: str, text: str) -> None:
        ttl = BRIEF_TTL_MS if question_id == self.plan.brief_id else NOTICE_TTL_MS
        fields = {"id": question_id, "to": to, "text": text, "from": ORCHESTRATOR_NAME, "ttlMs": ttl}
        await self._call("ask", fields)
        self._notices.append(question_id)
        self._seen[question_id] = _Seen()

    # --- observing the ledger -------------------------------------------------------------------------------

    async def _observe(self) -> None:
        team = await self._call("get", {})
        for exchange in team["exchanges"]:
            await self._exchange(exchange)

    async def _exchange(self, exchange: dict[str, Any]) -> None:
        question_id = str(exchange["id"])
        members = self._current().members
        seen = self._seen.get(question_id)
        if seen is None:
            if exchange["from"] not in members or exchange["to"] not in members:
                return  # not a session tool call: a person's question, or one to the orchestrator
            seen = self._seen[question_id] = _Seen()
            self._ledger(
                "ask", exchange["createdAt"], question_id, memberId=exchange["from"], to=exchange["to"]
            )
            # A supervise pair has one possible target, and its Ask names none (spec section 2).
            to = None if self.plan.mode is s.Mode.SUPERVISE else exchange["to"]
            ask = s.Ask(exchange["createdAt"], exchange["from"], question_id, exchange["text"], to)
            if not await self._step(ask):
                return
        answer = exchange.get("answer")
        if answer is not None and not seen.answered:
            seen.answered = True
            self._ledger("reply", answer["at"], question_id, memberId=answer["author"], late=answer["late"])
            if question_id == self.plan.brief_id:
                await self._conclude(answer["at"], str(answer["text"]))
            elif question_id in self._current().asks and not answer["late"]:
                await self._step(s.Answer(answer["at"], exchange["to"], question_id))
                await self._step(s.AskAnswered(answer["at"], question_id))
                await self._end_reminder(question_id)
        if exchange["state"] != "open" and not seen.ended:
            seen.ended = True
            reason = self._end_reasons.get(question_id, str(exchange["state"]))
            at = exchange.get("endedAt") or self._clock()
            why = {} if answer is not None else {"reason": reason}  # an answer is its own reason
            self._ledger("question_ended", at, question_id, state=exchange["state"], **why)
            if answer is None and question_id in self._current().asks:
                await self._step(s.AskEnded(at, question_id, reason))
                await self._end_reminder(question_id)

    async def _conclude(self, at: int, summary: str) -> None:
        """The lead's reply to its brief is its Conclude (Adjourn in a discuss session)."""
        lead = self.plan.lead.name
        limit = self.plan.limits.text_chars
        command: s.Conclude | s.Adjourn = (
            s.Adjourn(at, lead, summary[:limit])
            if self.plan.mode is s.Mode.DISCUSS
            else s.Conclude(at, lead, summary[:limit])
        )
        await self._step(command)

    def _ledger(self, kind: str, at: object, question_id: str, **fields: object) -> None:
        event = {"type": kind, "teamId": self.plan.session_id, "exchangeId": question_id, **fields}
        self._trace.emit(LEDGER, {**event, "at": at} if isinstance(at, int) else event)

    # --- the reducer and its effects ------------------------------------------------------------------------

    async def _accept(self, command: s.SessionCommand) -> s.SessionOutcome:
        """Step the reducer; a command that changes the session is journaled, durably, before any of its
        effects is applied (persist before act), so a daemon restarted after a crash resumes from it."""
        outcome = s.step(self.session, command, self.plan.limits)
        if isinstance(outcome, Accepted) and (outcome.state is not self.session or outcome.effects):
            await trio.to_thread.run_sync(_append_journal, self.directory, encode_command(command))
            self._journaled += 1
            self.session = outcome.state
        return outcome

    async def resume(self) -> s.Session:
        """Take the session up where a crashed daemon left it: replay its journal through the reducer, take
        the bookkeeping of the last settle, and apply again only the effects of the commands journaled
        after it (each ledger effect is idempotent by its id, so one already applied changes nothing). A
        session that never settled its start is formed again, with the same ids."""
        saved = await trio.to_thread.run_sync(_read_state, self.directory)
        commands = await trio.to_thread.run_sync(_read_journal, self.directory)
        if saved is None or not commands:
            return await self.start()
        pending: list[object] = []
        for n, command in enumerate(commands):
            outcome = s.step(self.session, command, self.plan.limits)
            if not isinstance(outcome, Accepted):
                why = f"{outcome.code}: {outcome.detail}"
                raise SessionError(f"the journal of session {self.plan.session_id} does not replay: {why}")
            self.session = outcome.state
            if n >= saved.applied:
                pending += outcome.effects
        self._journaled = len(commands)
        self._seen = {q: _Seen(answered, ended) for q, (answered, ended) in saved.seen.items()}
        self._notices, self._reminder_of = list(saved.notices), dict(saved.reminder_of)
        self._end_reasons, self._calls_closed = dict(saved.end_reasons), saved.calls_closed
        self._reminder_secret = saved.reminder_secret
        self._trace.emit(
            ORCHESTRATOR,
            {"type": "session_resumed", "session": self.plan.session_id, "replayed": len(commands)},
        )
        await self._apply(tuple(pending))
        await self._settle()
        return self._current()

    async def _step(self, command: s.SessionCommand) -> bool:
        """Apply one command; a refused tool call is traced and its ledger question cancelled. Whether it was
        accepted."""
        outcome = await self._accept(command)
        if isinstance(outcome, Accepted):
            await self._apply(outcome.effects)
            return True
        if isinstance(command, s.Ask):
            detail = f"{outcome.code}: {outcome.detail}"
            self._trace.emit(
                ORCHESTRATOR,
                {
                    "type": "tool_refused",
                    "tool": "ask",
                    "exchangeId": command.op,
                    "memberId": command.actor,
                    "code": str(outcome.code),
                    "detail": outcome.detail,
                },
            )
            await self._cancel(command.op, f"refused by session {self.plan.session_id}: {detail}")
        return False

    async def _apply(self, effects: tuple[object, ...]) -> None:
        for effect in effects:
            match effect:
                case s.TraceEvent():
                    self._trace.emit(ORCHESTRATOR, trace_event(effect))
                case s.SubmitReminder(participant=participant, question_id=question_id):
                    await self._remind(participant, question_id)
                case s.ReleaseAsker(question_id=question_id, reason=reason):
                    await self._end_question("expire", question_id, reason, reason)
                    await self._end_reminder(question_id)
                    asker = self._current().asks[question_id].asker
                    released = {"session": self.plan.session_id, "exchangeId": question_id, "reason": reason}
                    self._trace.emit(ORCHESTRATOR, {"type": "asker_released", **released, "memberId": asker})
                case s.CancelAsk(question_id=question_id, reason=reason):
                    await self._end_question("cancel", question_id, reason, ending_reason(self._current()))
                    await self._end_reminder(question_id)
                case s.PostAnnouncement():
                    await self._announce(effect)
                case s.PostToThread(post_id=post_id, kind=kind, author=author, text=text):
                    post = {"type": "thread_post", "session": self.plan.session_id, "postId": post_id}
                    self._trace.emit(
                        ORCHESTRATOR, {**post, "kind": str(kind), "memberId": author, "text": text}
                    )
                case _:
                    # OpenAsk and PostAnswer are already in the ledger (the tools are team operations), and
                    # the protocol_violation is traced.
                    pass

    # --- the session tools ----------------------------------------------------------------------------------

    async def _tool_calls(self) -> None:
        """Answer every call file `harness session TOOL` left, oldest name first (ids are drawn, so the order
        is only for determinism). The files are listed, read and removed in worker threads: a slow disk, or a
        FIFO a member left in a call's place, must not stall the daemon's loop."""
        calls = self.directory / CALLS_DIR
        for path in await trio.to_thread.run_sync(_call_files, calls):
            call_id = path.name[: -len(CALL_SUFFIX)]
            if not ID_PATTERN.fullmatch(call_id) or len(call_id) > CALL_ID_CHARS:
                await trio.to_thread.run_sync(_discard_call, path)  # no result file could be named for it
                continue
            result = await self._tool_call(call_id, await trio.to_thread.run_sync(_read_call, path))
            view = self._redactor.value(result)
            assert isinstance(view, dict)
            # A result path a member blocked (a directory that holds a file) leaves that call unanswered;
            # the session goes on.
            with contextlib.suppress(OSError):
                await trio.to_thread.run_sync(
                    homes.write_private_json, calls / f"{call_id}{RESULT_SUFFIX}", view
                )
            await trio.to_thread.run_sync(_discard_call, path)

    async def _tool_call(self, call_id: str, call: dict[str, Any] | str) -> dict[str, Any]:
        """One tool call's result: {"result": ...} or {"error", "detail"[, "bound"]}."""
        if isinstance(call, str):
            return {"error": "bad_request", "detail": call}
        tool, texted = CALL_TOOLS[call["tool"]]
        actor = self._caller(call["keyDigest"])
        if actor is None:
            detail = f"the member key is not one of session {self.plan.session_id}'s members"
            return self._refused(call_id, tool, None, Rejected(ErrorCode.UNAUTHORIZED, detail))
        at, text = self._clock(), call["text"] if texted else ""
        command: s.ToolCommand
        if tool is s.Tool.ANNOUNCE:
            command = s.Announce(at, actor, call_id, text)
        elif tool is s.Tool.REQUEST_FOR_COMMENT:
            command = s.RequestForComment(at, actor, call_id, text)
        elif tool is s.Tool.ACKNOWLEDGE:
            command = s.Acknowledge(at, actor, call_id, text)
        elif tool is s.Tool.RECESS:
            command = s.Recess(at, actor, text)
        else:
            command = s.RollCall(at, actor)
        outcome = await self._accept(command)
        if isinstance(outcome, Rejected):
            return self._refused(call_id, tool, actor, outcome)
        self._trace.emit(
            ORCHESTRATOR,
            {
                "type": "tool_call",
                "session": self.plan.session_id,
                "tool": str(tool),
                "id": call_id,
                "memberId": actor,
            },
        )
        await self._apply(outcome.effects)
        if tool is s.Tool.ROLL_CALL:
            return {"result": {"sessionId": self.plan.session_id, "members": await self._roll_call()}}
        session = self._current()
        if tool is s.Tool.ANNOUNCE:
            note = next(n for n in session.announcements if n.id == call_id)
            left = self.plan.limits.announcements - len(session.announcements)
            return {"result": {"id": note.id, "recipients": list(note.recipients), "announcementsLeft": left}}
        return {"result": {"id": call_id, "tool": str(tool)}}

    def _refused(self, call_id: str, tool: s.Tool, actor: str | None, refused: Rejected) -> dict[str, Any]:
        event = {"type": "tool_refused", "tool": str(tool), "id": call_id, "memberId": actor}
        self._trace.emit(ORCHESTRATOR, {**event, "code": str(refused.code), "detail": refused.detail})
        bound = {} if refused.bound is None else {"bound": refused.bound}
        return {"error": str(refused.code), "detail": refused.detail, **bound}

    def _caller(self, digest: str) -> str | None:
        """The session member whose key file holds the key of this digest (compared in constant time)."""
        for seat in self.plan.seats():
            try:
                key = homes.read_member_key(homes.member_key_path(self.home, self.plan.session_id, seat.name))
            except homes.HomeError:
                continue
            if hmac.compare_digest(key_digest(key), digest):
                return seat.name
        return None

    async def _roll_call(self) -> list[dict[str, Any]]:
        """The reducer's roll call, with what the desk last saw of each member's terminal."""
        agents = {seat.name: seat.agent_id for seat in self.plan.seats()}
        members = []
        for entry in s.roll_call(self._current()):
            seen: Any = None
            if await self._alive(entry.name):
                try:
                    shown = await self._call("agent_show", {"agentId": agents[entry.name]})
                    seen = (shown.get("delivery") or {}).get("observed")
                except RemoteError:
                    seen = None
            members.append(
                {
                    "name": entry.name,
                    "role": str(entry.role),
                    "observed": OBSERVATIONS.get(seen, "offline"),
                    "owed": list(entry.owed),
                    "lastActivityAt": entry.last_activity_at,
                }
            )
        return members

    async def _announce(self, note: s.PostAnnouncement) -> None:
        """Deliver an announcement as one board note to each recipient, and trace what reached whom."""
        delivered, refused = [], {}
        text = f"[announce] {note.author} (session {self.plan.session_id}): {note.text}"
        for n, name in enumerate(note.recipients, 1):
            command = {"type": "send_note", "to": {"kind": "member", "name": name}, "text": text}
            try:
                await self._call(
                    "board",
                    {"id": f"{self.plan.session_id}.announce.{note.announcement_id}.{n}", "command": command},
                )
            except RemoteError as error:
                refused[name] = error.code
            else:
                delivered.append(name)
        event = {"type": "announcement", "session": self.plan.session_id, "id": note.announcement_id}
        self._trace.emit(
            ORCHESTRATOR,
            {**event, "memberId": note.author, "delivered": delivered, "refused": refused, "text": note.text},
        )

    async def _remind(self, participant: str, question_id: str) -> None:
        ask = self._current().asks[question_id]
        reminder_id = self._reminder_id(question_id)
        text = (
            f"Reminder from session {self.plan.session_id}: you owe an answer to question {question_id} from "
            f'{ask.asker}. Answer it with `reply {question_id} "ANSWER"`; this reminder needs no reply. '
            "Without an answer the asker is released and a protocol violation is recorded."
        )
        event = {
            "type": "reminder",
            "session": self.plan.session_id,
            "exchangeId": question_id,
            "memberId": participant,
            "reminderId": reminder_id,
        }
        try:
            await self._notice(participant, reminder_id, text)
        except RemoteError as error:
            # The daemon answered (a team full of questions, say): not a daemon gone, and no reason to end the
            # session. The release stays due on time; the trace says why no reminder reached the participant.
            event |= {"refused": error.code, "detail": error.detail}
        else:
            self._reminder_of[question_id] = reminder_id  # only a reminder asked is cancelled later
        self._trace.emit(ORCHESTRATOR, event)

    def _reminder_id(self, question_id: str) -> str:
        """One question's reminder id, the same whenever it is asked (a session reminds a question once)."""
        drawn = hmac.new(self._reminder_secret.encode(), question_id.encode(), hashlib.sha256).hexdigest()
        return f"{self.plan.session_id}.reminder.{drawn[:REMINDER_ID_DIGITS]}"

    async def _end_reminder(self, question_id: str) -> None:
        reminder_id = self._reminder_of.get(question_id)
        if reminder_id is not None:
            await self._cancel(reminder_id, f"question {question_id} ended")

    async def _cancel(self, question_id: str, why: str) -> None:
        await self._end_question("cancel", question_id, why, None)

    async def _end_question(self, action: str, question_id: str, why: str, reason: str | None) -> None:
        """End an open ledger question as the owner (`cancel` or `expire`), the ledger keeping `reason`; one
        already ended stays as it ended. `why` is what the session's trace says."""
        if question_id in self._end_reasons:
            return
        self._end_reasons[question_id] = why
        try:
            await self._call(action, {"questionId": question_id, "reason": reason})
        except RemoteError as error:
            self._end_reasons.pop(question_id)
            if error.code not in ("conflict", "not_found"):
                raise

    async def _settle(self) -> None:
        """Make the trace durable, then the runner's bookkeeping and the status current (what `harness
        session status` reads)."""
        await self._trace.flush()
        saved = _Saved(
            self._journaled,
            {q: (seen.answered, seen.ended) for q, seen in self._seen.items()},
            tuple(self._notices),
            dict(self._reminder_of),
            dict(self._end_reasons),
            self._calls_closed,
            self._reminder_secret,
        )
        await trio.to_thread.run_sync(homes.write_private_json, self.directory / STATE_FILE, saved.view())
        status = status_view(self._current(), self._trace.directory, os.getpid())
        view = self._redactor.value(
            {**status, "callsClosed": self._calls_closed, "leadSeen": self._lead_seen}
        )
        assert isinstance(view, dict)  # redaction keeps an object an object
        await trio.to_thread.run_sync(homes.write_private_json, self.directory / STATUS_FILE, view)


def ending_reason(session: s.Session) -> str:
    """How the session ended, as a ledger reason: `concluded`, `adjourned`, `recessed` or `stopped`."""
    if session.termination is s.Termination.CONCLUDED:
        return ENDED_BY[(session.reason or "").partition(" ")[0]]
    return STOPPED


def trace_event(effect: s.TraceEvent) -> dict[str, object]:
    """A reducer trace event as a trace line's event: camelCase fields, and a protocol violation named the way
    `harness trace summary` reads it (exchangeId, memberId, rule)."""
    fields = {
        _camel(key): list(value) if isinstance(value, tuple) else value
        for key, value in effect.fields.items()
    }
    event: dict[str, object] = {"type": str(effect.kind), **fields}
    if effect.kind is s.TraceKind.PROTOCOL_VIOLATION:
        event.update(exchangeId=fields["question"], memberId=fields["participant"], rule=fields["reason"])
    return event


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def key_digest(key: str) -> str:
    """What a call file carries of the caller's member key: enough to find its member, never the key."""
    return hashlib.sha256(key.encode()).hexdigest()


def session_options(home: Path, session_id: str, seat: Seat) -> str:
    """What a member adds to a `harness session` tool: its data directory and its key file (never the key)."""
    key_file = homes.member_key_path(home, session_id, seat.name)
    return f"--home {shlex.quote(str(home))} --key-file {shlex.quote(str(key_file))}"


def _call_files(calls: Path) -> list[Path]:
    return sorted(calls.glob(f"*{CALL_SUFFIX}")) if calls.is_dir() else []


def _read_call(path: Path) -> dict[str, Any] | str:
    """A call file's tool, text and key digest, or why it is refused. It blocks on the disk: call it in a
    worker thread."""
    try:
        # Never waiting on a FIFO, nor following a link out of the session's private directory (ELOOP).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        why = "not a regular file" if error.errno == errno.ELOOP else f"not readable ({error.strerror})"
        return f"the call file is {why}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "the call file is not a regular file"
        raw = _read_at_most(fd, CALL_BYTES + 1)
    except OSError as error:
        return f"the call file is not readable ({error.strerror})"
    finally:
        os.close(fd)
    data = parse_json(raw, max_bytes=CALL_BYTES)
    if isinstance(data, JsonRefused):
        why = data.detail if data.reason == "too_large" else f"not readable JSON ({data.detail})"
        return f"the call file is {why}"
    if not isinstance(data, dict) or data.get("tool") not in CALL_TOOLS:
        return f"a call names one tool of: {', '.join(CALL_TOOLS)}"
    digest, text = data.get("keyDigest"), data.get("text", "")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest) or not isinstance(text, str):
        return "a call carries a 'keyDigest' of 64 hex digits and a string 'text'"
    return {"tool": data["tool"], "keyDigest": digest, "text": text}


def _read_at_most(fd: int, most: int) -> bytes:
    chunks: list[bytes] = []
    left = most
    while left > 0 and (chunk := os.read(fd, left)):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _discard_call(path: Path) -> None:
    """Remove an answered call file, so it is answered once. A directory in a call's place goes too when it
    is empty; one that holds anything is kept (the runner removes no file it never read), refused again at
    each poll."""
    try:
        path.unlink(missing_ok=True)
    except IsADirectoryError:
        with contextlib.suppress(OSError):
            path.rmdir()


def introduction(plan: SessionPlan, session: s.Session, name: str, where: str) -> str:
    """The session's word to one member: its role, exactly its role's tools as commands (`where` is what it
    adds to a `harness session` tool), and for the lead the brief."""
    role = session.members[name].role
    others = ", ".join(n for n in session.member_order if n != name) or "nobody"
    words = {"brief": plan.brief_id, "session": f"{harness_command()} session", "sid": plan.session_id}
    tools = [
        TOOL_USAGE[tool].format(announcements=plan.limits.announcements, where=where, **words)
        for tool in s.Tool
        if tool in s.ROLE_TOOLS[role]
    ]
    lines = [
        f"Session {plan.session_id} ({plan.mode}): you are its {role}; the others are {others}.",
        "Your tools, run with the team commands you were taught or as shown: " + "; ".join(tools) + ".",
    ]
    if name == plan.lead.name:
        lines.append(f"Brief: {plan.brief}")
    else:
        lines.append(
            "Answer every question you owe: an ask left unanswered gets one reminder, then a protocol "
            "violation is recorded and its asker released. This notice needs no reply."
        )
    return "\n".join(lines)


def status_view(session: s.Session, trace_dir: Path, pid: int) -> dict[str, Any]:
    return {
        "sessionId": session.id,
        "teamId": session.id,
        "mode": str(session.mode),
        "lead": session.lead,
        "members": [{"name": n, "role": str(session.members[n].role)} for n in session.member_order],
        "state": str(session.state),
        "termination": None if session.termination is None else str(session.termination),
        "reason": session.reason,
        "summary": session.summary,
        "asks": [_ask_view(session.asks[q]) for q in session.ask_order],
        "reminders": list(session.reminders),
        "violations": list(session.violations),
        "announcements": [
            {"id": a.id, "author": a.author, "at": a.at, "recipients": list(a.recipients), "text": a.text}
            for a in session.announcements
        ],
        "rfcs": [{"id": r.id, "author": r.author, "at": r.at, "text": r.text} for r in session.rfcs],
        "thread": [
            {"id": p.id, "kind": str(p.kind), "author": p.author, "at": p.at, "text": p.text}
            for p in session.thread
        ],
        "leadTurns": session.lead_turns,
        "startedAt": session.started_at,
        "endedAt": session.ended_at,
        "trace": str(trace_dir),
        "pid": pid,
    }


def _ask_view(ask: s.AskRecord) -> dict[str, Any]:
    return {"id": ask.id, "asker": ask.asker, "to": ask.to, "state": str(ask.state), "reason": ask.reason}


def request_stop(home: Path, session_id: str) -> None:
    """Ask the session's runner to stop it (abort): it sees the file at its next poll."""
    homes.write_private_text(session_dir(home, session_id) / STOP_FILE, "stop\n")
