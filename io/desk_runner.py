# This machine's delivery desk, run: the trio shell around `harness.core.delivery`. The desk reducer decides
# whether a notice may be written; this module looks at terminals, feeds it what it saw, and writes only what
# it licensed. It is also the destination side of `team_delivery` for the local machine.
#
# Shape (persist before act, as in the owner's ledger):
# - `apply` is the one way into the desk: it stamps the time, steps, appends an accepted change to the desk's
#   journal (`<home>/teams/delivery`) and waits until it is durable, and only then acts on the effects:
#   reports to the owner, write rechecks, timers and the one terminal write. A lock serializes it, so the
#   journal order is the step order and replay rebuilds the desk exactly. Each durable notice state change is
#   emitted to its team's trace there (written, fsynced later). `apply_all` steps several commands (the owner
#   requests of one ledger batch) under one append; a look or tick, an owner's request, and the end of a write
#   and the turn after it, each when its report goes to an owner on this machine and it licenses no write,
#   ride the next append instead of waiting for their own (spec/delivery-v1.md, section 7, Journal).
# - On start the desk is replayed and told `Restart`: a write that was in flight becomes `unconfirmed` and is
#   never retried; queued work waits for a fresh look at its terminal.
# - The runner loop looks at agents that have queued work, feeds `Observe` only when what it saw differs from
#   the desk's latest look (or that look is no longer a fresh idle), and on `WriteDue` asks the terminal to
#   write. It looks at every waiting agent once a poll; a wake between polls (new work, a write done) looks
#   only at the agents it concerns, so an ask costs the same with 2 or 800 agents waiting on busy screens.
#   A look too soon after a write (before the screen could settle) is taken again once it could. The
#   terminal's own last look before the paste is the write boundary: the runner hands it to the desk as
#   `WriteStarted` when idle (the paste goes ahead only once that is durable) and as `Observe` otherwise, so a
#   write refused there never left `queued`: it waits with the reason that look saw. After a write the
#   runner watches for the agent's turn on what it wrote.
# - A notice's licence to paste is granted at most once per write id and process (asserted), and only after
#   the desk durably accepted its `WriteStarted`; the desk's own state makes it at most once per write id
#   ever, and a second write id exists only after the owner declared the first write lost (`resolve`).
# - A draft that is exactly the text of this desk's own unconfirmed notice of that agent (a write cut off
#   between paste and Enter by a kill) is observed `leftover`, with that notice remembered for the views:
#   the person submits or clears it; the runner never touches it.
# - The owner's `inspect` of a written notice is a read: the pane's whole history (its next turn included)
#   is searched for the notice's own first line, and the composer for its text. It never steps the desk.
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import attrs
import trio

from harness.core import delivery as d
from harness.core.codec import desk_command_from_json, desk_command_to_json, desk_from_json, to_json
from harness.core.delivery_invariants import step_violations as desk_step_violations
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted, reject
from harness.core.queries import delivery_view
from harness.core.records import NoticeKind, Team
from harness.core.riding import desk_step_rides
from harness.core.system import refused_reason
from harness.core.team import REINTRODUCED, replay_limits
from harness.core.terminal_text import terminal_safe
from harness.io.desk_parts import DeskParts
from harness.io.journal import CheckpointPolicy, JournalStore
from harness.io.journal_files import Recovery, StoreError, delivery_store_dir
from harness.io.journaled import Reducer, ReplayError, Stepper, Violated, replay_entries
from harness.io.profiles import squash
from harness.io.team_delivery import DeliveryReport, OwnerRequest, Reporter
from harness.io.terminal_port import Screen, ScreenState, Terminals, Transcripts, WriteOutcome
from harness.io.trace import TraceEmit, no_trace
from harness.io.trace_files import DESK

# Unsure never licenses a write: an engine that is still starting counts as busy.
OBSERVED: dict[ScreenState, d.Observed] = {
    ScreenState.IDLE: d.Observed.IDLE,
    ScreenState.BUSY: d.Observed.BUSY,
    ScreenState.DRAFT: d.Observed.DRAFT,
    ScreenState.DIALOG: d.Observed.DIALOG,
    ScreenState.OFFLINE: d.Observed.OFFLINE,
    ScreenState.STARTING: d.Observed.BUSY,
    ScreenState.SETTLING: d.Observed.SETTLING,
}

# Notices whose write may have landed: the runner watches for the agent's turn on them.
_TURN_PENDING = frozenset({d.DeliveryState.DELIVERED, d.DeliveryState.UNCONFIRMED})


# What an inspection found, by how sure it is that the notice reached the agent.
LANDED = "landed"  # its first line shows in the pane's history: the engine took it (or showed it)
IN_COMPOSER = "in_composer"  # its text sits in the composer unsubmitted: a leftover for a person to act on
NOT_FOUND = "not_found"  # nowhere in the pane's history (the history may have been cleared or scrolled off)
NO_TERMINAL = "no_terminal"  # this machine cannot read the agent's pane now: nothing was searched
EVIDENCE_CHARS = 300  # an evidence line as shown (one line, terminal-escaped)


@attrs.frozen
class Inspection:
    """The owner's look for evidence that a written notice landed. A read: nothing is sent or recorded."""

    notice_id: str
    write_id: str
    state: str
    found: str  # LANDED, IN_COMPOSER, NOT_FOUND or NO_TERMINAL
    evidence: str | None = None  # the line that shows it, one line, terminal-escaped

    def to_json(self) -> dict[str, object]:
        return {
            "noticeId": self.notice_id,
            "writeId": self.write_id,
            "state": self.state,
            "found": self.found,
            "evidence": self.evidence,
        }


def evidence_key(notice: d.Notice) -> str:
    """What identifies the notice in a transcript: its first line, whitespace collapsed, up to the end of its
    own id (the exchange's) when the line names it; else its first 60 characters."""
    first = " ".join(next((line for line in notice.text.splitlines() if line.strip()), "").split())
    at = first.find(notice.subject_id)
    return first[: at + len(notice.subject_id)] if at >= 0 else first[:60]


def find_evidence(transcript: str, notice: d.Notice) -> str | None:
    """The last transcript line that shows the notice's key (after prompt signs and box edges), or None."""
    key = squash(evidence_key(notice))
    if not key:
        return None
    for line in reversed(transcript.splitlines()):
        if key in squash(line):
            return shown_line(line)
    return None


def shown_line(text: str) -> str:
    """Screen text as evidence: one line, terminal-escaped (a pane may hold any bytes), bounded."""
    return terminal_safe(" ".join(text.split()), line_breaks=False)[:EVIDENCE_CHARS]


@attrs.frozen
class RunnerTiming:
    poll_ms: int = 500  # how often agents with queued work (or a written notice to confirm) are looked at
    turn_watch_ms: int = 10 * 60_000  # how long after a write the runner looks for the agent's turn on it


DESK_REDUCER: Final = Reducer(d.step, desk_step_violations)


def replay_desk(
    machine_id: str, recovery: Recovery, limits: Limits, parts: DeskParts | None = None
) -> d.Desk:
    """Rebuild the desk from its checkpoint and journal (the reducer is deterministic); `parts` learns which
    of the checkpoint's parts hold which of its notices."""
    desk = _restored_desk(recovery)
    if desk is not None and desk.machine_id != machine_id:
        raise ReplayError(f"the checkpoint is the desk of machine {desk.machine_id!r}")
    if desk is not None and parts is not None and recovery.checkpoint is not None:
        members = recovery.checkpoint.get("notices")
        parts.seed(desk, recovery.parts, members if isinstance(members, dict) else {})
    admitted = replay_limits(limits)  # each entry was admitted under the limits of its day
    start = d.empty_desk(machine_id) if desk is None else desk
    return replay_entries(DESK_REDUCER, start, recovery, desk_command_from_json, limits=admitted)[0]


def _restored_desk(recovery: Recovery) -> d.Desk | None:
    """The desk the store's checkpoint holds (its notices rows or objects: `desk_from_json`), or None
    without one; `restored` of io/journaled.py, with the desk's own decoder."""
    if recovery.checkpoint is None:
        return None
    loaded = desk_from_json(recovery.checkpoint)
    if isinstance(loaded, Rejected):
        raise ReplayError(f"checkpoint {recovery.checkpoint_seq} is not a desk: {loaded.detail}")
    return loaded


def desk_events(desk: d.Desk, effects: Sequence[object]) -> list[tuple[str, dict[str, object]]]:
    """(team id, trace event) of every notice state change a durable desk step recorded (its DeliveryChanged
    effects, read against the desk after the step): ids, kind, state and reason, never the notice's text."""
    events: list[tuple[str, dict[str, object]]] = []
    for effect in effects:
        if not isinstance(effect, d.DeliveryChanged):
            continue
        event: dict[str, object] = {"type": "notice", "teamId": effect.team_id, "noticeId": effect.notice_id}
        event.update(state=effect.state.value, at=effect.at)
        if effect.reason is not None:
            event["reason"] = effect.reason.value
        # The record's own fields, not its id's parts: a re-introduction's id holds `member~AT`, no member id.
        notice = desk.notices[effect.notice_id]
        event.update(memberId=notice.membership_id, kind=notice.kind.value)
        if notice.kind is not NoticeKind.INTRODUCTION:  # a question or answer notice is about an exchange
            event["exchangeId"] = notice.subject_id
        events.append((effect.team_id, event))
    return events


def _last_at(desk: d.Desk) -> int:
    """The latest time the desk has seen, so that stamps after a replay never go back."""
    latest = max((notice.updated_at for notice in desk.notices.values()), default=0)
    observed = max((session.observed_at for session in desk.sessions.values()), default=0)
    return max(latest, observed, desk.restarted_at)


@attrs.define
class _Watch:
    agent_id: str
    text: str
    until: int


class DeskRunner:
    """The local destination: `await nursery.start(runner.run)` opens and replays the desk, then runs it."""

    def __init__(
        self,
        home: Path,
        machine_id: str,
        report: Reporter,
        terminals: Terminals | None = None,
        *,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], int],
        timing: RunnerTiming | None = None,
        checkpoint_policy: CheckpointPolicy | None = None,
        log: Callable[[str], None] = lambda line: None,
        violated: Violated | None = None,  # None: invariants are not checked
        trace: TraceEmit = no_trace,
        reports_ride: Callable[[str], bool] = lambda team_id: False,
        gate_writes: bool = False,
    ) -> None:
        self.machine_id = machine_id
        # With `gate_writes` nothing is written after the start until `allow_writes` (the daemon: once the
        # owner's restated holds and withdrawals are applied, so a desk whose journal is behind never writes
        # what the owner ended or paused).
        self._writes_allowed = trio.Event()
        if not gate_writes:
            self._writes_allowed.set()
        # Whether the owner of a team records this desk's reports without an fsync of their own and restates
        # every notice it owes at each start: a team owned here (the daemon says; spec/delivery-v1.md 7).
        self._reports_ride = reports_ride
        self._trace = trace
        self.desk = d.empty_desk(machine_id)  # durable: only `apply` replaces it, after the append
        self.unavailable: str | None = None  # why the desk is stopped (corrupt or failed store)
        self.writes = 0  # terminal writes licensed by this process (tests and logs)
        self._home = home
        self._report = report
        self._terminals = terminals
        self._limits = limits
        self._steps = Stepper(DESK_REDUCER, limits, clock, violated)
        self._clock = clock
        self._timing = timing or RunnerTiming()
        self._checkpoints = checkpoint_policy or CheckpointPolicy()
        self._log = log
        self._store: JournalStore | None = None
        self._lock = trio.Lock()
        self._wake = trio.Event()
        self._due: set[str] = set()  # agents whose next notice is due: ask their terminal to write it
        self._attempts: set[str] = set()  # agents whose terminal is at the write boundary now
        self._relook: set[str] = set()  # agents whose next look is fed to the desk whatever it shows
        self._written: set[str] = set()  # write ids licensed to be pasted by this process
        self._watches: dict[str, _Watch] = {}  # written notices whose agent turn is awaited
        self._next_poll = -math.inf  # clock ms of the next look at every waiting agent
        self._looked: set[str] = set()  # waiting agents looked at since the last poll
        self.leftovers: dict[str, str] = {}  # agent -> its unconfirmed notice left in its composer
        self._writes: trio.Nursery | None = None
        self._checkpointing = False  # one checkpoint at a time; a step meanwhile does not start another
        self._parts = DeskParts()  # what the last checkpoint wrote: the next writes only what changed
        self._loop_scope = trio.CancelScope()

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[DeskRunner] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._open()
            async with trio.open_nursery() as writes:
                self._writes = writes
                task_status.started(self)
                with self._loop_scope:
                    if self.unavailable is None:
                        # The owner's guards first (the daemon listens once they are applied), then every
                        # notice's state told again, then the terminals.
                        await self._writes_allowed.wait()
                        await self._sync()
                        await self._loop()
                    else:
                        await trio.sleep_forever()
                # Stopping: writes already begun (and a checkpoint) finish and report; nothing new starts.
            self._writes = None
        finally:
            with trio.CancelScope(shield=True):
                if self._store is not None:
                    await self._store.aclose()

    def allow_writes(self) -> None:
        """Let the desk look at terminals and write (see `gate_writes`)."""
        self._writes_allowed.set()

    def stop(self) -> None:
        """Stop looking and starting writes; a write in progress still finishes and is recorded."""
        self._loop_scope.cancel()

    async def _open(self) -> None:
        directory = delivery_store_dir(self._home)
        try:
            self._store, recovery = await JournalStore.open(directory)
            self.desk = replay_desk(self.machine_id, recovery, self._limits, self._parts)
        except (StoreError, OSError, ReplayError) as error:
            self._stop_desk(f"{directory}: {error}")
            return
        self._steps.last_at = _last_at(self.desk)
        restarted = await self.apply(d.Restart(0))
        assert isinstance(restarted, Accepted) or self.unavailable is not None
        watch_ms = self._timing.turn_watch_ms
        for notice in self.desk.notices.values():  # a write that may have landed: its turn may still show
            if notice.state in _TURN_PENDING and notice.updated_at + watch_ms > self._clock():
                self._watches[notice.id] = _Watch(notice.agent_id, notice.text, notice.updated_at + watch_ms)

    def _stop_desk(self, why: str) -> None:
        self.unavailable = f"{ErrorCode.CORRUPT_STATE}: the delivery desk is stopped: {why}"
        self._log(self.unavailable)

    async def _sync(self) -> None:
        """Tell the owner every notice's state once: a report lost in a crash or a shutdown is repeated."""
        async with self._lock:
            for notice in self.desk.notices.values():
                await self._report(_report_of(notice.team_id, notice.id, notice.state, notice.reason))

    # --- the desk ------------------------------------------------------------------------------------------

    async def apply(self, command: d.DeskCommand) -> Accepted[d.Desk] | Rejected:
        """Step the desk; an accepted change is durable before any of its effects leaves the process."""
        return (await self.apply_all((command,)))[0]

    def stamp(self) -> int:
        """The time the desk gives the command it steps now: its clock, never behind a command before."""
        return self._steps.peek()

    async def apply_all(self, commands: Sequence[d.DeskCommand]) -> list[Accepted[d.Desk] | Rejected]:
        """Step the desk through `commands` in order (group commit): their accepted changes share one durable
        append, and only after it does any effect of any of them leave the process."""
        async with self._lock:
            desk = self.desk
            outcomes: list[Accepted[d.Desk] | Rejected] = []
            changed: list[d.DeskCommand] = []
            for request in commands:
                if self.unavailable is not None:
                    break
                command = self._steps.stamped(request)
                outcome, why = self._steps.checked(desk, command, "on the desk")
                if why is not None:  # never applied: the desk stops, as for a journal that cannot be written
                    self._stop_desk(why)
                    break
                outcomes.append(outcome)
                if isinstance(outcome, Accepted) and outcome.changed:
                    desk = outcome.state
                    changed.append(command)
            accepted = [outcome for outcome in outcomes if isinstance(outcome, Accepted)]
            if changed and self.unavailable is None:
                assert self._store is not None
                entries = [desk_command_to_json(command) for command in changed]
                try:
                    if _unheeded(commands, outcomes, self._reports_ride):
                        seq = (await self._store.ride(entries))[-1]  # rides the next durable append
                    else:
                        seq = (await self._store.append_all(entries))[-1]
                except (StoreError, trio.ClosedResourceError) as error:
                    # It may or may not be on disk: act on none of it, and write nothing until a restart.
                    self._stop_desk(f"the desk journal could not be written ({error})")
                    return [reject(ErrorCode.CORRUPT_STATE, self.unavailable or "")] * len(commands)
                self.desk = desk
                for outcome in accepted:  # journaled now (riding: written, not yet fsynced): traced
                    for team_id, event in desk_events(desk, outcome.effects):
                        self._trace(team_id, DESK, event)
                if self._checkpoints.due(self._store) and not self._checkpointing:
                    self._checkpointing = True
                    if self._writes is None:  # opening: nothing else runs yet
                        await self._checkpoint(seq, desk)
                    else:
                        self._writes.start_soon(self._checkpoint, seq, desk)
            elif self.unavailable is not None:  # stepped on a desk that never became durable: none counts
                return [reject(ErrorCode.CORRUPT_STATE, self.unavailable)] * len(commands)
            for outcome in accepted:
                await self._act(outcome.effects)
            return outcomes

    async def _checkpoint(self, seq: int, desk: d.Desk) -> None:
        """Checkpoint `desk`, the state after entry `seq`, without holding the desk: at its bound the encoding
        takes a few hundred milliseconds, spent in a worker thread (the desk is immutable) while later steps
        append after `seq`, which the checkpoint does not cover and compaction keeps."""
        assert self._store is not None
        try:
            await self._store.checkpoint(seq, functools.partial(self._parts.payload, self._store, seq, desk))
        except StoreError as error:
            self._stop_desk(f"the desk checkpoint could not be written ({error})")
        finally:
            self._checkpointing = False

    async def _act(self, effects: Sequence[object]) -> None:
        for effect in effects:
            if isinstance(effect, d.DeliveryChanged):
                await self._report(_report_of(effect.team_id, effect.notice_id, effect.state, effect.reason))
            elif isinstance(effect, d.WriteDue):
                self._due.add(effect.agent_id)
                self._wake.set()
            elif isinstance(effect, d.WriteNotice):
                pass  # the licence the terminal is waiting for at the write boundary (see `_write`)
            else:
                assert isinstance(effect, d.ArmDeskTimer)
                self._wake.set()  # the loop sleeps until the desk's earliest timer

    # --- team_delivery: the owner's requests ---------------------------------------------------------------

    async def requests(self, commands: Sequence[OwnerRequest]) -> None:
        """Several owner requests at once (the effects of one ledger batch): they share one durable append."""
        for command, outcome in zip(commands, await self.apply_all(commands), strict=True):
            if isinstance(command, d.Submit):
                await self._submitted(command, outcome)
            else:
                self._refused(command, outcome)

    async def submit(self, command: d.Submit) -> None:
        await self._submitted(command, await self.apply(command))

    async def _submitted(self, command: d.Submit, outcome: Accepted[d.Desk] | Rejected) -> None:
        if isinstance(outcome, Rejected):
            # As core.system routes a refused submit: never silent loss, the owner sees why.
            reason = refused_reason(outcome)
            state = d.DeliveryState.REJECTED
            if outcome.code is ErrorCode.CORRUPT_STATE:
                state, reason = d.DeliveryState.QUEUED, outcome.code.value  # owed; waits for the repair
            await self._report(DeliveryReport(command.team_id, command.notice_id, state.value, reason))
        elif not outcome.changed:  # a repeat or a restatement: the owner's view may be stale, so tell it
            notice = outcome.state.notices[command.notice_id]
            await self._report(_report_of(notice.team_id, notice.id, notice.state, notice.reason))
        else:  # new work: its agent is looked at now, not at the next poll
            self._looked.discard(command.agent_id)
            self._wake.set()

    async def status(self, team_id: str, notice_ids: Sequence[str]) -> list[DeliveryReport]:
        return [
            attrs.evolve(
                _report_of(team_id, notice.id, notice.state, notice.reason),
                started_at=notice.started_at,
                seen_at=notice.seen_at,
            )
            for notice_id in notice_ids
            if (notice := self.desk.notices.get(notice_id)) is not None and notice.team_id == team_id
        ]

    def _owned(self, team_id: str, notice_id: str) -> d.Notice | Rejected:
        notice = self.desk.notices.get(notice_id)
        if notice is None or notice.team_id != team_id:
            return reject(ErrorCode.NOT_FOUND, f"no notice {notice_id!r} of team {team_id!r} on this machine")
        return notice

    async def inspect(self, team_id: str, notice_id: str) -> Inspection | Rejected:
        """The owner's search for evidence that a written notice landed: the composer for its text (a
        leftover), else the pane's whole history for its first line. A read: the desk does not step."""
        notice = self._owned(team_id, notice_id)
        if isinstance(notice, Rejected):
            return notice
        if notice.started_at is None:
            detail = f"notice {notice_id!r} is {notice.state}: not written, so there is nothing to look for"
            return reject(ErrorCode.CONFLICT, detail)
        found = functools.partial(Inspection, notice.id, d.write_id(notice), notice.state.value)
        terminals = self._terminals
        if not isinstance(terminals, Transcripts) or notice.agent_id not in terminals.agents():
            return found(NO_TERMINAL)
        screen = await self._screen(notice.agent_id)
        if screen.prompt and squash(screen.prompt) == squash(notice.text):
            return found(IN_COMPOSER, shown_line(screen.prompt))
        try:
            transcript = await terminals.transcript(notice.agent_id)
        except Exception as error:  # a pane we cannot read says nothing about the notice
            self._log(f"reading agent {notice.agent_id!r}'s history failed: {error!r}")
            transcript = None
        if transcript is None:
            return found(NO_TERMINAL)
        line = find_evidence(transcript, notice)
        return found(NOT_FOUND) if line is None else found(LANDED, line)

    async def resolve(self, team_id: str, notice_id: str, *, landed: bool) -> d.Notice | Rejected:
        """The owner's resolution of a written notice (never automatic): landed confirms it; lost queues it
        for one more write under its next write id, once (the desk refuses a second declared loss)."""
        notice = self._owned(team_id, notice_id)
        if isinstance(notice, Rejected):
            return notice
        outcome = await self.apply(d.Inspect(0, notice_id, landed))
        if isinstance(outcome, Rejected):
            return outcome
        return outcome.state.notices[notice_id]

    async def hold(self, command: d.Hold) -> None:
        await self._owner(command)

    async def release(self, command: d.Release) -> None:
        await self._owner(command)

    async def cancel(self, command: d.Withdraw | d.WithdrawMember | d.WithdrawTeam) -> None:
        await self._owner(command)

    async def consume(self, command: d.InboxRead | d.AnswerRetrieved) -> None:
        await self._owner(command)

    async def _owner(self, command: d.DeskCommand) -> None:
        self._refused(command, await self.apply(command))

    def _refused(self, command: d.DeskCommand, outcome: Accepted[d.Desk] | Rejected) -> None:
        if isinstance(outcome, Rejected) and outcome.code is not ErrorCode.CORRUPT_STATE:
            self._log(f"delivery desk refused {type(command).__name__}: {outcome.code}: {outcome.detail}")

    # --- the runner ---------------------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            self._wake = trio.Event()
            timer = self._next_timer()
            if timer is not None and timer <= self._clock():
                await self.apply(d.Tick(0))
            rechecked = sorted(self._due)
            self._due.clear()
            for agent_id in rechecked:
                await self._recheck(agent_id)
            waiting = self._waiting_agents()
            polling = self._clock() >= self._next_poll
            if polling:
                self._next_poll = self._clock() + self._timing.poll_ms
                self._looked.clear()
            settled_at = math.inf  # when the earliest look taken before its screen could settle counts
            for agent_id in waiting:
                # A refused write waits a poll (no hot loop on one agent); one at its boundary looks itself.
                # Between polls a wake looks only at the agents it concerns (new work, not looked at since
                # the poll): the others' screens are a poll old at most, whatever else happens meanwhile.
                fresh = agent_id not in rechecked and agent_id not in self._attempts
                if fresh and (agent_id not in self._looked or agent_id in self._relook):
                    looked_at = self._clock()
                    await self._look(agent_id)
                    settling = self.desk.sessions.get(agent_id)
                    if settling is not None and settling.idle_after > looked_at:  # too soon after a write
                        settled_at = min(settled_at, settling.idle_after)
                    else:
                        self._looked.add(agent_id)
            await self._watch_turns()
            delay = max(0, self._next_poll - self._clock()) if waiting or self._watches else math.inf
            delay = min(delay, max(0, settled_at - self._clock() + 1))
            timer = self._next_timer()
            if timer is not None:
                delay = min(delay, max(0, timer - self._clock() + 1))
            with trio.move_on_after(delay / 1000):
                await self._wake.wait()

    def _next_timer(self) -> int | None:
        return min((s.timers[0][0] for s in self.desk.sessions.values() if s.timers), default=None)

    def _waiting_agents(self) -> list[str]:
        """Agents with a queued notice and no write in flight: the only ones worth looking at."""
        return sorted(
            agent_id
            for agent_id, session in self.desk.sessions.items()
            if session.queue and session.writing is None
        )

    async def screen(self, agent_id: str) -> Screen:
        """What the agent's terminal shows now, as its engine's profile reads it: a session the daemon hosts
        counts its lead's turns from it (io/session_keeper.py)."""
        return await self._screen(agent_id)

    async def _screen(self, agent_id: str) -> Screen:
        terminals = self._terminals
        if terminals is None or agent_id not in terminals.agents():
            return Screen(ScreenState.OFFLINE, self._clock(), ("no terminal for this agent on this machine",))
        try:
            return await terminals.observe(agent_id)
        except Exception as error:  # a terminal we cannot read is one we must not write to
            self._log(f"observing agent {agent_id!r} failed: {error!r}")
            return Screen(ScreenState.OFFLINE, self._clock(), (f"observe failed: {error!r}",))

    def _observed(self, agent_id: str, screen: Screen) -> d.Observed:
        """What the desk is told of a screen: a draft that is exactly this desk's own unconfirmed notice of
        the agent is a crash leftover, named (the newest such notice), never touched."""
        observed = OBSERVED[screen.state]
        leftover = None
        if observed is d.Observed.DRAFT and screen.prompt:
            prompt = squash(screen.prompt)
            leftover = max(
                (
                    notice
                    for notice in self.desk.notices.values()
                    if notice.agent_id == agent_id
                    and notice.state is d.DeliveryState.UNCONFIRMED
                    and squash(notice.text) == prompt
                ),
                key=lambda notice: notice.updated_at,
                default=None,
            )
        if leftover is None:
            self.leftovers.pop(agent_id, None)
            return observed
        self.leftovers[agent_id] = leftover.id
        return d.Observed.LEFTOVER

    async def _look(self, agent_id: str) -> None:
        screen = await self._screen(agent_id)
        observed = self._observed(agent_id, screen)
        session = self.desk.sessions.get(agent_id)
        if session is None:
            return
        stale_idle = observed is d.Observed.IDLE and not d.fresh_idle(session, self._clock(), self._limits)
        if agent_id in self._relook or session.observed is not observed or stale_idle:
            self._relook.discard(agent_id)
            await self.apply(d.Observe(0, agent_id, observed))

    async def _recheck(self, agent_id: str) -> None:
        """A write is due: the terminal looks once more at the write boundary and writes only on that look."""
        session = self.desk.sessions.get(agent_id)
        if session is None or session.writing is not None or not session.queue or agent_id in self._attempts:
            return
        terminals = self._terminals
        if terminals is None or agent_id not in terminals.agents():
            await self.apply(d.Observe(0, agent_id, OBSERVED[(await self._screen(agent_id)).state]))
            return
        notice = self.desk.notices[session.queue[0]]
        assert self._writes is not None
        self._attempts.add(agent_id)
        self._writes.start_soon(self._write, terminals, notice)

    async def _write(self, terminals: Terminals, notice: d.Notice) -> None:
        agent_id, notice_id = notice.agent_id, notice.id
        licensed = False

        async def licence(screen: Screen) -> bool:
            """The terminal's last look before the paste: a write starts on it, or the notice waits on it."""
            nonlocal licensed
            observed = self._observed(agent_id, screen)
            if observed is not d.Observed.IDLE:
                await self.apply(d.Observe(0, agent_id, observed))
                return False
            started = await self.apply(d.WriteStarted(0, notice_id, observed, screen.at_ms))
            if isinstance(started, Rejected):
                self._relook.add(agent_id)  # the desk wants a newer look; the next one is fed to it
                return False
            write = d.write_id(self.desk.notices[notice_id])
            assert write not in self._written, f"write {write!r} would be made twice"
            self._written.add(write)
            self.writes += 1
            licensed = True
            return True

        try:
            outcome = await terminals.write(agent_id, notice.text, licence)
        except Exception as error:  # once licensed, bytes may have reached the terminal: never retried
            self._log(f"writing notice {notice_id!r} to agent {agent_id!r} failed: {error!r}")
            outcome = WriteOutcome.UNCERTAIN
            self._relook.add(agent_id)
        finally:
            self._attempts.discard(agent_id)
        if licensed:
            finished = await self.apply(d.WriteFinished(0, notice_id, d.WriteResult(outcome.value)))
            if isinstance(finished, Accepted) and outcome is not WriteOutcome.FAILED:
                until = self._clock() + self._timing.turn_watch_ms
                self._watches[notice_id] = _Watch(agent_id, notice.text, until)
        self._wake.set()

    async def _watch_turns(self) -> None:
        terminals = self._terminals
        now = self._clock()
        for notice_id, watch in list(self._watches.items()):
            notice = self.desk.notices.get(notice_id)
            if notice is None or notice.state not in _TURN_PENDING or now > watch.until:
                del self._watches[notice_id]
                continue
            if terminals is None or watch.agent_id not in terminals.agents():
                continue
            try:
                matched = await terminals.turn_matches(watch.agent_id, watch.text)
            except Exception as error:
                self._log(f"looking for agent {watch.agent_id!r}'s turn failed: {error!r}")
                continue
            if matched:
                del self._watches[notice_id]
                await self.apply(d.TurnObserved(0, notice_id))


def _unheeded(
    commands: Sequence[d.DeskCommand],
    outcomes: Sequence[Accepted[d.Desk] | Rejected],
    reports_ride: Callable[[str], bool],
) -> bool:
    """Whether a batch's journal entries may ride the next durable append: every step of it may (core
    `desk_step_rides`, for the teams owned here, `reports_ride`). A machine crash before that append loses
    only them; this desk writes nothing after a start before the owner's restated guards are applied
    (`gate_writes`)."""
    return all(
        isinstance(outcome, Accepted) and desk_step_rides(command, outcome, reports_ride)
        for command, outcome in zip(commands, outcomes, strict=True)
    )


def _report_of(
    team_id: str, notice_id: str, state: d.DeliveryState, reason: d.Reason | None
) -> DeliveryReport:
    return DeliveryReport(team_id, notice_id, state.value, None if reason is None else reason.value)


# --- a person's desk prune (explicit cleanup; the seed rules out background retention deletion) -------------

# Records nothing more happens to. The receipt of a `writing` or `unconfirmed` notice is the evidence that
# prevents a second write, and queued or held ones are work still owed: those are never pruned, nor any state
# not listed here.
PRUNABLE = frozenset(
    {
        d.DeliveryState.DELIVERED,
        d.DeliveryState.ACCEPTED,
        d.DeliveryState.READ,
        d.DeliveryState.REJECTED,
        d.DeliveryState.WITHDRAWN,
        d.DeliveryState.EXPIRED,
    }
)


def _owed_here(home: Path, limits: Limits) -> tuple[set[str], set[str], dict[str, Team]]:
    """The notice ids the teams owned here still owe (a restatement would submit them again, so their
    receipts must stay), the teams whose owed notices are known (those owned here and readable, and those
    deleted here; a team owned on a paired machine, or unreadable here, is not known: all its records stay),
    and the ledgers of the teams owned here."""
    from harness.core.team import owed_notices
    from harness.io import home as homes
    from harness.io.journal_files import CorruptState, ledgers_dir, scan_store_consistent
    from harness.io.ledger_runner import replay

    owed: set[str] = set()
    known = set(homes.deleted_teams(home))
    teams: dict[str, Team] = {}
    root = ledgers_dir(home)
    for team_id in sorted(path.name for path in root.iterdir() if path.is_dir()) if root.is_dir() else ():
        known.discard(team_id)  # deleted, then created again: only its ledger says what it owes
        try:
            team, _ = replay(team_id, scan_store_consistent(root / team_id).recovery, limits)
        except (CorruptState, ReplayError):
            continue
        known.add(team_id)
        if team is not None:
            teams[team_id] = team
            owed.update(notice.notice_id for notice in owed_notices(team, limits))
    return owed, known, teams


def _recorded(team: Team | None, notice: d.Notice) -> bool:
    """Whether the owner's ledger records the notice's last state, so that no start needs this record to tell
    it again: the report may have ridden the ledger's next append and been lost with a crash (spec/team-v1.md,
    Choices). A deleted team's ledger is gone, and a re-introduction's view may describe a later one: there
    is nothing to tell them."""
    if team is None or REINTRODUCED in notice.subject_id:
        return True
    view = delivery_view(team, notice.id)
    return view is not None and view.state == notice.state.value


async def prune_desk(home: Path, limits: Limits, before: int, backup: Path, now: int) -> dict[str, object]:
    """`harness daemon prune --before DATE`, while no daemon runs: write a backup of the whole desk store to
    `backup` first, then drop the records `PRUNABLE` and last changed before `before` (ms) whose notice no
    team owned (or deleted) here still owes and no session names. The pruned desk is a checkpoint after one
    `Restart` (what the daemon's next start records anyway), so replay rebuilds exactly it."""
    from harness.io import home as homes
    from harness.io.doctor import export_store
    from harness.io.ledger_runner import CleanupRefused, daemon_stopped

    with daemon_stopped(home):
        directory = delivery_store_dir(home)
        if not directory.is_dir():
            raise CleanupRefused(ErrorCode.NOT_FOUND.value, f"this machine has no delivery desk in {home}")
        exported = export_store(directory, backup)
        owed, known, teams = _owed_here(home, limits)
        store, recovery = await JournalStore.open(directory)
        try:
            desk = replay_desk(homes.machine_id(home), recovery, limits)
            named = {
                notice_id
                for session in desk.sessions.values()
                for notice_id in (
                    *session.queue,
                    *session.held,
                    session.writing,
                    *(t[1] for t in session.timers),
                )
            }
            gone = [
                notice.id
                for notice in desk.notices.values()
                if notice.state in PRUNABLE
                and notice.updated_at < before
                and notice.team_id in known
                and notice.id not in owed
                and notice.id not in named
                and _recorded(teams.get(notice.team_id), notice)
            ]
            if gone:
                command = d.Restart(max(now, _last_at(desk)))
                restarted = d.step(desk, command, limits)
                assert isinstance(restarted, Accepted)
                seq = await store.append(desk_command_to_json(command))
                notices = restarted.state.notices
                for notice_id in gone:
                    notices = notices.delete(notice_id)
                await store.checkpoint(seq, to_json(attrs.evolve(restarted.state, notices=notices)))
        finally:
            await store.aclose()
    return {
        "backup": exported["out"],
        "before": before,
        "pruned": len(gone),
        "kept": len(desk.notices) - len(gone),
    }
