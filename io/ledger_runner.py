# The owner's team ledger, run: the one writer of the journaled team reducer (`harness.core.team.step`), as
# the desk runner is of the desk's. Split from the daemon so the persist-before-act pipeline reads on its own.
#
# Shape (persist before act, as in raft's Ready rule):
# - Commands arrive over one bounded channel. The ledger task takes every command that arrived in one turn of
#   the event loop (several clients' asks, the reports of one desk batch), stamps and steps each, and queues
#   the accepted changes as one journal append per team, so they share one fsync, as do commands that arrive
#   during an fsync (group commit).
# - The finisher takes the stepped commands in order, waits until each is durable, then publishes the new
#   state to readers and waiters, hands effects on (timers here, desk-bound ones to the effect sink), and
#   only then answers. Readers see only durable state; nothing leaves before the command that caused it is
#   on disk. The team's trace (`ledger_events`) is emitted there too: written at once, fsynced later.
# - A team whose journal cannot be read or written is stopped (`unavailable`) until the daemon restarts.
#   Opening and replaying every store (`open_stores`) and that stop's wording are shared with the boards'
#   runner (io/board_runner.py).
from __future__ import annotations

import bisect
import contextlib
import enum
import functools
import os
import shutil
import stat
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Final, Protocol, TypeVar

import attrs
import trio

from harness.core.bounded_json import parse_own
from harness.core.codec import command_from_json, command_to_json, from_json, to_json
from harness.core.commands import (
    AddMember,
    ArchiveTeam,
    Ask,
    Cancel,
    CreateTeam,
    RecordDelivery,
    RemoveMember,
    Reply,
    TeamCommand,
    Tick,
)
from harness.core.effects import (
    ArmTimer,
    HoldTeam,
    ReleaseTeam,
    SubmitNotice,
    WithdrawMember,
    WithdrawNotice,
    WithdrawTeam,
)
from harness.core.errors import ErrorCode, Rejected
from harness.core.invariants import step_violations as team_step_violations
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted, reject
from harness.core.queries import usage
from harness.core.records import (
    EMPTY_LEDGER,
    ID_PATTERN,
    Exchange,
    Ledger,
    MembershipState,
    Team,
    TeamState,
)
from harness.core.team import next_deadline, replay_limits, step
from harness.io import home as homes
from harness.io.fileops import FileOps
from harness.io.journal import CheckpointPolicy, JournalStore
from harness.io.journal_files import (
    CorruptState,
    Recovery,
    StoreError,
    ledger_store_dir,
    ledgers_dir,
    scan_store_consistent,
)
from harness.io.journaled import Reducer, ReplayError, Stepper, Violated, replay_entries, restored
from harness.io.team_delivery import DeliveryReport
from harness.io.trace import TraceEmit, no_trace
from harness.io.trace_files import LEDGER

LIMITS_ENV = "HARNESS_LIMITS"
# Commands waiting for the ledger task before RPC handlers feel back-pressure.
LEDGER_QUEUE = 64
# Commands stepped but not yet durable; bounds the memory a burst can pin and the work a crash can lose.
PIPELINE_DEPTH = 256

E = ErrorCode
DeskEffect = SubmitNotice | WithdrawNotice | HoldTeam | ReleaseTeam | WithdrawTeam | WithdrawMember
# A broken core invariant (what broke it, the violation) -> the reason the team stops.


def limits_from_env() -> Limits:
    """HARNESS_LIMITS='{"pendingPerSender": 2, ...}' shrinks bounds (tests); camelCase Limits fields."""
    raw = os.environ.get(LIMITS_ENV)
    if not raw:
        return DEFAULT_LIMITS
    try:
        data = parse_own(raw)
    except ValueError as error:
        raise ValueError(f"{LIMITS_ENV} is not JSON: {error}") from None
    limits = from_json(data, Limits)
    if isinstance(limits, Rejected):
        raise ValueError(f"{LIMITS_ENV}: {limits.detail}")
    return limits


class ShuttingDown(Exception):
    """A command sent after intake closed: it was never stepped."""


class EffectSink(Protocol):
    """Where a durable command's desk-bound effects go (the delivery router)."""

    def route(self, ledger: Ledger, effect: DeskEffect, at: int) -> None: ...


@attrs.define
class Pending:
    """One command on its way through the ledger task and the finisher."""

    command: TeamCommand
    done: trio.Event = attrs.Factory(trio.Event)
    outcome: Accepted[Ledger] | Rejected | None = None
    persisted: trio.Event | None = None  # set when the journal append finished (None: nothing to persist)
    seq: int | None = None  # its journal entry's, once journaled (None: not yet, or nothing to persist)
    failure: BaseException | None = None
    rides: bool = False  # a report of this machine's desk: journaled without an fsync of its own (`report`)


def _ready(first: Pending, tickets: trio.MemoryReceiveChannel[Pending]) -> Iterator[Pending]:
    """`first`, then every ticket already waiting behind it, taken without a checkpoint of trio's."""
    yield first
    while True:
        try:
            yield tickets.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return


def _persisted(group: list[Pending], seqs: list[int] | None, failure: BaseException | None) -> None:
    """The journal append of `group` finished: at `seqs`, or not (`failure`)."""
    for index, pending in enumerate(group):
        pending.seq = None if seqs is None else seqs[index]
        pending.failure = failure
        assert pending.persisted is not None
        pending.persisted.set()


def _with_team(ledger: Ledger, team_id: str, team: Team | None) -> Ledger:
    if team is None:
        return Ledger(ledger.teams.delete(team_id)) if team_id in ledger.teams else ledger
    return Ledger(ledger.teams.set(team_id, team))


# Why a question that was still open ended, by the command that ended it, when the command gave no reason of
# its own (an expiry by the clock needs none; the reason a cancel or the owner's expire gave wins).
END_REASONS: dict[type[TeamCommand], str] = {
    Cancel: "cancelled_by_asker",
    RemoveMember: "member_removed",
    ArchiveTeam: "team_archived",
}


def ledger_events(before: Team | None, after: Team, command: TeamCommand) -> list[dict[str, object]]:
    """The trace events of one durable command that changed `before` into `after` (spec/trace-v1.md): only
    ids, states and times, never a text or a key. Looks only where this command can have changed something."""
    base: dict[str, object] = {"teamId": after.id, "at": command.at}
    events: list[dict[str, object]] = []
    if before is None:
        events.append({"type": "team_created", **base})
    elif before.state is not after.state:
        events.append({"type": "team_state", **base, "state": after.state.value})
    if isinstance(command, CreateTeam | AddMember | RemoveMember):
        for member_id in after.member_order:
            member = after.members[member_id]
            was = None if before is None else before.members.get(member_id)
            if was is None or was.state is not member.state:
                kind = "member_added" if member.state is MembershipState.ACTIVE else "member_removed"
                events.append({"type": kind, **base, "memberId": member_id, "role": member.role})
    asked = after.exchanges.get(command.id) if isinstance(command, Ask) else None
    if asked is not None and (before is None or asked.id not in before.exchanges):
        fields = {"exchangeId": asked.id, "memberId": asked.from_, "to": asked.to}
        events.append({"type": "ask", **base, **fields})
    replied = after.exchanges.get(command.question_id) if isinstance(command, Reply) else None
    answer = None if replied is None else replied.answer
    if replied is not None and answer is not None:
        unanswered = None if before is None else before.exchanges.get(replied.id)
        if unanswered is None or unanswered.answer is None:
            reply = {"type": "reply", **base, "exchangeId": replied.id, "memberId": answer.author}
            events.append({**reply, "late": answer.late})
    if before is not None and not _only_opened(before.open_deadlines, after.open_deadlines, asked):
        ended_now = set(before.open_deadlines).difference(after.open_deadlines)
        for _, exchange_id in (deadline for deadline in before.open_deadlines if deadline in ended_now):
            ended = after.exchanges.get(exchange_id)
            if ended is None:
                continue
            event = {"type": "question_ended", **base, "exchangeId": exchange_id, "state": ended.state.value}
            reason = ended.reason or END_REASONS.get(type(command))
            if reason is not None and ended.answer is None:
                event["reason"] = reason
            events.append(event)
    return events


Deadlines = tuple[tuple[int, str], ...]


def _only_opened(before: Deadlines, after: Deadlines, asked: Exchange | None) -> bool:
    """Whether `after` is `before` with at most the new question's deadline added: then no question ended.
    Shown by comparing tuples in C, which compares the shared elements by identity, so an ask does not cost
    as much as the questions its team holds open (a Python loop, or hashing every deadline, did)."""
    if after is before:
        return True
    if asked is None or len(after) != len(before) + 1:
        return False
    added = (asked.deadline_at, asked.id)
    at = bisect.bisect_left(after, added)
    return at < len(after) and after[at] == added and after[:at] + after[at + 1 :] == before


R = TypeVar("R")


async def open_stores(
    root: Path, replay: Callable[[str, Recovery], R], stop: Callable[[str, str], None]
) -> dict[str, tuple[JournalStore, R]]:
    """Open and replay the journal store of every key (team id) under `root`, for the ledger and the boards
    alike. A store that cannot be opened (damaged, or an error of the file system), read or replayed is closed
    and only its key stopped (`corrupt_state`); a symlink in a store's place is a damaged store, never
    followed."""
    opened: dict[str, tuple[JournalStore, R]] = {}
    for key in sorted(os.listdir(root)) if root.is_dir() else []:
        directory = root / key
        try:
            if not stat.S_ISDIR(kind := os.lstat(directory).st_mode) and not stat.S_ISLNK(kind):
                continue  # a stray file is no store
            store, recovery = await JournalStore.open(directory)
        except CorruptState as error:
            stop(key, f"{E.CORRUPT_STATE}: {error}")
            continue
        except OSError as error:
            stop(key, f"{E.CORRUPT_STATE}: {directory} cannot be opened: {error}")
            continue
        try:
            opened[key] = (store, replay(key, recovery))
        except ReplayError as error:
            await store.aclose()
            stop(key, f"{E.CORRUPT_STATE}: {directory}: {error}")
    return opened


def unwritable(what: str, error: BaseException) -> str:
    """Why a store that failed a write stops its team's ledger or board until the daemon restarts."""
    return (
        f"{what} could not be written ({error}); it is stopped until the daemon restarts. The last request "
        "may or may not have been recorded: retry it with the same operation id"
    )


TEAM_REDUCER: Final = Reducer(step, team_step_violations)


def replay(team_id: str, recovery: Recovery, limits: Limits) -> tuple[Team | None, int]:
    """Rebuild one team from its checkpoint and journal; also the latest command time seen."""
    team = restored(recovery, Team, "team")
    ledger = EMPTY_LEDGER if team is None else _with_team(EMPTY_LEDGER, team_id, team)

    def stranger(command: TeamCommand) -> str | None:
        return None if command.team_id == team_id else f"belongs to team {command.team_id!r}"

    admitted = replay_limits(limits)  # each entry was admitted under the limits of its day
    ledger, last_at = replay_entries(
        TEAM_REDUCER, ledger, recovery, command_from_json, limits=admitted, stranger=stranger
    )
    return ledger.teams.get(team_id), last_at


class LedgerRunner:
    """The team ledger of one data directory: `recover`, then `run` until intake closes."""

    def __init__(
        self,
        home: Path,
        limits: Limits,
        clock: Callable[[], int],
        *,
        checkpoints: CheckpointPolicy,
        log: Callable[[str], None],
        violated: Violated | None = None,  # None: invariants are not checked
        trace: TraceEmit = no_trace,
    ) -> None:
        self.home = home
        self.limits = limits
        self._trace = trace
        self.clock = clock
        self._checkpoints = checkpoints
        self._checkpointing: set[str] = set()  # teams whose checkpoint is being written
        self._log = log
        self._steps = Stepper(TEAM_REDUCER, limits, clock, violated)
        self.working: Ledger = EMPTY_LEDGER  # stepped, maybe not yet durable: only the ledger task reads it
        self.durable: Ledger = EMPTY_LEDGER  # what readers see
        self.stores: dict[str, JournalStore] = {}
        self.unavailable: dict[str, str] = {}  # team id -> why it is stopped (corrupt or failed store)
        self._changed: dict[str, trio.Event] = {}
        self._timers: dict[str, int] = {}
        self._timers_changed = trio.Event()
        self._send, self._receive = trio.open_memory_channel[Pending](LEDGER_QUEUE)

    async def recover(self) -> None:
        opened = await open_stores(
            ledgers_dir(self.home),
            lambda team_id, found: replay(team_id, found, self.limits),
            self._stop_team,
        )
        for team_id, (store, (team, last_at)) in opened.items():
            self.stores[team_id] = store
            self._steps.last_at = max(self._steps.last_at, last_at)
            if team is not None:
                self.durable = _with_team(self.durable, team_id, team)
                deadline = next_deadline(team)
                if deadline is not None:
                    self._timers[team_id] = deadline
        self.working = self.durable

    async def aclose(self) -> None:
        for store in self.stores.values():
            await store.aclose()

    async def close_intake(self) -> None:
        """Take no more commands; `run` returns once every queued one is durable."""
        await self._send.aclose()

    def team(self, team_id: str) -> Team | None:
        """The durable team `team_id`, as readers see it now."""
        return self.durable.teams.get(team_id)

    def over_limits(self) -> list[dict[str, object]]:
        """What the teams hold beyond this daemon's limits (a bound lowered at a restart): per team and bound,
        the use and the limit, for `harness doctor`. It refuses new work of that kind; nothing is lost."""
        over: list[dict[str, object]] = []
        durable = self.durable
        for team_id in sorted(durable.teams):
            uses = usage(durable, team_id, self.limits, self.clock())
            assert not isinstance(uses, Rejected)  # the team is in the ledger
            for use in uses:
                if use.use > use.limit:
                    team = None if use.bound == "teams" else team_id  # the owner's own bound
                    row = {"teamId": team, "bound": use.bound, "use": use.use, "limit": use.limit}
                    over.append({**row, "subject": use.subject, "advice": use.advice})
        owners = [row for row in over if row["teamId"] is None]
        return owners[:1] + [row for row in over if row["teamId"] is not None]

    def changed(self, team_id: str) -> trio.Event:
        """An event set at the team's next durable change (or when it stops)."""
        return self._changed.setdefault(team_id, trio.Event())

    def _publish(self, team_id: str) -> None:
        event = self._changed.pop(team_id, None)
        if event is not None:
            event.set()

    def _stop_team(self, team_id: str, why: str) -> None:
        self.unavailable[team_id] = why
        self._log(f"team {team_id} stopped: {why}")

    async def submit(self, command: TeamCommand) -> Accepted[Ledger] | Rejected:
        """Send a command to the ledger and wait for its durable outcome. Shielded: once sent, it finishes."""
        pending = Pending(command)
        with trio.CancelScope(shield=True):
            try:
                await self._enter(pending)
            except trio.ClosedResourceError:
                raise ShuttingDown from None
            await pending.done.wait()
        assert pending.outcome is not None
        return pending.outcome

    async def report(self, report: DeliveryReport, *, rides: bool = False) -> None:
        """Record a destination's report (this desk's, or a paired machine's) in the owner ledger.

        With `rides` (a report of this machine's own desk about a team owned here, or the daemon's own
        `unpaired`) its journal entry is written at once but waits for no fsync of its own
        (`JournalStore.enqueue`): it becomes durable with the team's next append, or when the store closes.
        The desk tells the owner every notice's state again at each start, and the start reports every
        notice owed to an unpaired machine again, so a machine crash that loses such entries (only ever the
        journal's last ones) loses nothing a restart does not restore (spec/team-v1.md, Choices). A paired
        machine's report is appended durably: nothing there repeats it when this daemon restarts."""
        command = RecordDelivery(0, report.team_id, report.notice_id, report.state, report.reason)
        pending = Pending(command, rides=rides)
        # Shutting down: a lost observation is one the destination reports again after the restart.
        with contextlib.suppress(trio.ClosedResourceError):
            await self._enter(pending)

    async def _enter(self, pending: Pending) -> None:
        """Queue `pending` for the ledger task, without a turn of the event loop while the queue has room: the
        reports of one desk batch (or of a start's sync), and the requests that arrived together, reach the
        ledger task together and are stepped in one of its turns (and a request's task steps once less)."""
        try:
            self._send.send_nowait(pending)
        except trio.WouldBlock:
            await self._send.send(pending)

    async def run(self, sink: EffectSink) -> None:
        tickets_send, tickets_receive = trio.open_memory_channel[Pending](PIPELINE_DEPTH)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._ledger_task, tickets_send, nursery)
            nursery.start_soon(self._finisher, tickets_receive, sink, nursery)

    # --- the ledger task, the journal and the finisher ------------------------------------------------------

    async def _ledger_task(self, tickets: trio.MemorySendChannel[Pending], nursery: trio.Nursery) -> None:
        async with tickets:
            async for first in self._receive:
                # One turn of the event loop lets commands sent alongside `first` land (several clients' asks,
                # the reports of one desk batch); they are stepped together and share one append per team.
                await trio.lowlevel.checkpoint()
                turn = [first, *self._arrived()]
                writes: dict[str, tuple[JournalStore, list[Pending]]] = {}
                for pending in turn:
                    store = await self._step(pending)
                    if store is not None:
                        writes.setdefault(pending.command.team_id, (store, []))[1].append(pending)
                for store, group in writes.values():
                    self._persist(store, group, nursery)
                for pending in turn:
                    try:  # no turn of the event loop per ticket: the finisher takes a turn's tickets at once
                        tickets.send_nowait(pending)
                    except trio.WouldBlock:
                        await tickets.send(pending)

    def _arrived(self) -> list[Pending]:
        """The commands already waiting in the queue, without waiting for more."""
        arrived: list[Pending] = []
        while len(arrived) < LEDGER_QUEUE:
            try:
                arrived.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        return arrived

    async def _step(self, pending: Pending) -> JournalStore | None:
        """Step one command on the working ledger; the store its accepted change is to be appended to."""
        command = pending.command = self._steps.stamped(pending.command)
        team_id = command.team_id
        if team_id in self.unavailable:
            pending.outcome = reject(E.CORRUPT_STATE, self.unavailable[team_id])
            return None
        outcome, why = self._steps.checked(self.working, command, f"on team {team_id!r}")
        pending.outcome = outcome
        if why is not None:  # never applied: the team stops, as for a ledger that cannot be written
            self._stop_team(team_id, why)
            pending.outcome = reject(E.CORRUPT_STATE, why)
            return None
        if isinstance(outcome, Rejected) or not outcome.changed:
            return None
        store = self.stores.get(team_id)
        if store is None:  # only a new team's create gets here
            try:
                store, _ = await JournalStore.open(ledger_store_dir(self.home, team_id))
            except (StoreError, OSError) as error:
                detail = f"cannot open the ledger of team {team_id!r}: {error}"
                pending.outcome = reject(E.CORRUPT_STATE, detail)
                return None
            self.stores[team_id] = store
        # Per team: the store open above may have let the finisher revert another team meanwhile.
        self.working = _with_team(self.working, team_id, outcome.state.teams[team_id])
        pending.persisted = trio.Event()
        return store

    def _persist(self, store: JournalStore, group: list[Pending], nursery: trio.Nursery) -> None:
        """Journal `group` now, in the order the ledger task stepped it (its seqs are taken here, without
        yielding), and set each one's `persisted` once it is durable: at once for reports that ride and were
        written into the file, else from a task that waits for the fsync while the ledger task goes on."""
        wait: Callable[[], Awaitable[object]] | None
        try:
            entries = [command_to_json(pending.command) for pending in group]
            if all(pending.rides for pending in group):
                seqs = store.enqueue(entries)  # durable with the team's next append (`report`)
                wait = store.sync if store.unwritten else None
            else:
                queued = store.queue(entries)
                seqs = list(range(queued.first, queued.last + 1))
                wait = functools.partial(store.durable, queued)
        except (StoreError, trio.ClosedResourceError, ValueError, TypeError) as error:
            _persisted(group, None, error)
            return
        if wait is None:
            _persisted(group, seqs, None)
        else:
            nursery.start_soon(self._durable, group, seqs, wait)

    async def _durable(
        self, group: list[Pending], seqs: list[int], wait: Callable[[], Awaitable[object]]
    ) -> None:
        try:
            await wait()
        except StoreError as error:
            _persisted(group, None, error)
        else:
            _persisted(group, seqs, None)

    async def _finisher(
        self, tickets: trio.MemoryReceiveChannel[Pending], sink: EffectSink, nursery: trio.Nursery
    ) -> None:
        async for first in tickets:
            for pending in _ready(first, tickets):
                await self._finish(pending, sink, nursery)

    async def _finish(self, pending: Pending, sink: EffectSink, nursery: trio.Nursery) -> None:
        """Commit one command whose append finished, in journal order. Without yielding when its append is
        already done: the commits of one group then reach the router (and the desk) as one batch."""
        team_id = pending.command.team_id
        checkpoint = False
        if pending.persisted is not None:
            if not pending.persisted.is_set():
                await pending.persisted.wait()
            if pending.failure is not None:
                self._fail_team(team_id, pending.failure)
            else:
                checkpoint = self._commit(pending, sink)
        if team_id in self.unavailable:
            # Stepped on state that never became durable: the only honest answer is the failure.
            pending.outcome = reject(E.CORRUPT_STATE, self.unavailable[team_id])
        pending.done.set()
        # One checkpoint of a team at a time; at a riding entry's seq it makes the journal durable first.
        if checkpoint and pending.seq is not None and team_id not in self._checkpointing:
            self._checkpointing.add(team_id)
            nursery.start_soon(self._checkpoint, team_id, pending.seq, self.durable.teams.get(team_id))

    def _commit(self, pending: Pending, sink: EffectSink) -> bool:
        outcome = pending.outcome
        assert isinstance(outcome, Accepted)
        team_id = pending.command.team_id
        team = outcome.state.teams[team_id]
        before = self.durable.teams.get(team_id)
        self.durable = _with_team(self.durable, team_id, team)
        for event in ledger_events(before, team, pending.command):  # durable now: traced, never waited on
            self._trace(team_id, LEDGER, event)
        if isinstance(pending.command, RemoveMember) and outcome.changed:
            # Its key is revoked in the ledger; the file that held it for its introduction goes too.
            homes.remove_member_key(self.home, team_id, pending.command.membership_id)
        for effect in outcome.effects:
            if isinstance(effect, ArmTimer):
                self._arm(team_id, effect.at)
            elif isinstance(effect, DeskEffect):
                sink.route(outcome.state, effect, pending.command.at)
        self._publish(team_id)
        return self._checkpoints.due(self.stores[team_id])

    async def _checkpoint(self, team_id: str, seq: int, team: Team | None) -> None:
        """Checkpoint `team`, the durable team as entry `seq` was committed, while the finisher goes on: it is
        encoded in a worker thread (the team is immutable) and later entries append after `seq`, which the
        checkpoint does not cover (the journal allows a checkpoint behind its durable end)."""
        store = self.stores.get(team_id)
        try:
            if team is not None and store is not None and team_id not in self.unavailable:
                await store.checkpoint(seq, functools.partial(to_json, team))
        except StoreError as error:
            self._fail_team(team_id, error)
        finally:
            self._checkpointing.discard(team_id)

    def _fail_team(self, team_id: str, error: BaseException) -> None:
        self._stop_team(team_id, unwritable(f"the ledger of team {team_id!r}", error))
        self.working = _with_team(self.working, team_id, self.durable.teams.get(team_id))
        self._publish(team_id)

    # --- timers ---------------------------------------------------------------------------------------------

    def _arm(self, team_id: str, at: int) -> None:
        self._timers[team_id] = at
        self._timers_changed.set()

    async def run_timers(self) -> None:
        """Tick each team at its next deadline, until cancelled."""
        while True:
            self._timers_changed = trio.Event()
            if not self._timers:
                await self._timers_changed.wait()
                continue
            team_id, at = min(self._timers.items(), key=lambda item: item[1])
            delay = (at - self.clock() + 1) / 1000
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._timers_changed.wait()
                continue
            del self._timers[team_id]
            await self.submit(Tick(0, team_id))
            # A tick may have changed nothing (it fired a hair early); the state says what is next.
            team = self.durable.teams.get(team_id)
            deadline = next_deadline(team) if team is not None and team_id not in self.unavailable else None
            if deadline is not None and team_id not in self._timers:
                self._timers[team_id] = deadline


# --- explicit cleanup: a person's, never background retention (the seed rules that out) --------------------


class Missing(enum.StrEnum):
    """The step an explicit cleanup needs first: the stable code of its refusal."""

    STOP_DAEMON = "stop_daemon_first"  # cleanup works on the stores only while no daemon uses them
    ARCHIVE = "archive_first"  # only an archived team is deleted: it owes no terminal anything
    EXPORT = "export_first"  # only after a backup of everything the ledger holds was written


class CleanupRefused(Exception):
    """A cleanup refused before it changed anything; `code` is a Missing or a protocol error code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


@contextlib.contextmanager
def daemon_stopped(home: Path) -> Iterator[None]:
    """Hold the data directory's one-daemon lock for a cleanup: no daemon can start meanwhile."""
    try:
        lock = homes.lock_home(home)
    except homes.DaemonRunning as error:
        detail = f"{error}; stop it first (harness daemon stop --home {home})"
        raise CleanupRefused(Missing.STOP_DAEMON, detail) from None
    except OSError as error:
        raise CleanupRefused(E.NOT_FOUND.value, f"cannot use the data directory {home}: {error}") from None
    try:
        yield
    finally:
        os.close(lock)


def _current_export(home: Path, team_id: str, directory: Path, last_seq: int) -> str:
    """Where the export that holds every entry of the team's ledger is; refused when there is none."""
    export = f"harness team --home {home} --team {team_id} export --out FILE"
    note = homes.read_export_note(home, team_id)
    if note is None or not isinstance(note.get("out"), str):
        raise CleanupRefused(
            Missing.EXPORT, f"no export of team {team_id!r} was written: {export}, then delete"
        )
    out = Path(note["out"])
    try:
        document = parse_own(out.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CleanupRefused(Missing.EXPORT, f"the export {out} cannot be read ({error}): {export}") from None
    held = document.get("lastSeq") if isinstance(document, dict) else None
    source = document.get("source") if isinstance(document, dict) else None
    if held != last_seq or source is None or Path(str(source)).absolute() != directory.absolute():
        detail = f"the export {out} holds entry {held} of the ledger, which has {last_seq}: {export}"
        raise CleanupRefused(Missing.EXPORT, detail)
    return str(out)


def delete_team(home: Path, team_id: str, now: int) -> dict[str, object]:
    """`harness team --team T delete`: remove an archived team's ledger and key files, once an export of all
    of it was written, while no daemon runs. The team's board is moved aside as a replaced generation would
    be (it is not in the export); its desk records stay until a desk prune, which then knows nothing owes
    them. Frees the team's slot in the `teams` bound."""
    from harness.io.board_runner import board_store_dir, replaced_dir  # it imports this module

    if not ID_PATTERN.fullmatch(team_id):  # it names directories to remove: never a path
        raise CleanupRefused(E.BAD_REQUEST.value, f"{team_id!r} is not a team id")
    with daemon_stopped(home):
        directory = ledger_store_dir(home, team_id)
        if not directory.is_dir():
            raise CleanupRefused(E.NOT_FOUND.value, f"no ledger of team {team_id!r} in {home}")
        try:
            recovery = scan_store_consistent(directory).recovery
            team, _ = replay(team_id, recovery, DEFAULT_LIMITS)  # only its state matters here
            homes.deleted_teams(home)  # readable, before anything changes
        except (CorruptState, ReplayError, homes.HomeError) as error:
            raise CleanupRefused(E.CORRUPT_STATE.value, f"{directory}: {error}") from None
        if team is None or team.state is not TeamState.ARCHIVED:
            state = "empty" if team is None else team.state.value
            detail = f"team {team_id!r} is {state}: archive it first (harness team --team {team_id} archive)"
            raise CleanupRefused(Missing.ARCHIVE, detail)
        export = _current_export(home, team_id, directory, recovery.last_seq)
        homes.note_deleted_team(home, team_id, now)  # first: a prune trusts it only once the ledger is gone
        shutil.rmtree(directory)
        FileOps().fsync_dir(directory.parent)  # gone for good before anything else is
        board, aside = board_store_dir(home, team_id), replaced_dir(home, team_id, team.created_at)
        if board.is_dir():
            aside.parent.mkdir(mode=homes.PRIVATE_DIR_MODE, parents=True, exist_ok=True)
            board.rename(aside)
        homes.remove_team_files(home, team_id)
    return {
        "deleted": team_id,
        "export": export,
        "lastSeq": recovery.last_seq,
        "board": str(aside) if aside.is_dir() else None,
    }
