# The machine daemon: the trio shell around the owner's team ledger. It owns the data directory, serves the
# `team` RPC on a Unix socket inside it (this user only: the directory is 0700 and each peer's uid is
# checked), and is the only place where time, random ids and durability enter.
#
# Shape (persist before act, as in raft's Ready rule):
# - RPC handlers, the timer and delivery reports send commands over one bounded channel to the ledger task,
#   the only writer of the ledger. It stamps the time, runs `step`, and for an accepted change queues the
#   command's journal append at once, so commands that arrive during an fsync share it (group commit).
# - The finisher takes the stepped commands in order, waits until each is durable, then publishes the new
#   state to readers, waiters and watchers, hands effects to the delivery worker, and only then answers.
#   Readers see only durable state; nothing leaves the process before the command that caused it is on disk.
# - The delivery worker turns each team effect into the desk command of its destination (the routing of
#   `harness.core.system`) and hands it over `team_delivery`: to this machine's desk runner, which journals it
#   before acting and reports delivery states back as RecordDelivery commands, or, for a member on a paired
#   machine, to that machine's desk through the sealed relay (io/remote.py). Team-wide requests (hold,
#   release, withdrawals) also fan out to every paired machine holding notices of the team.
# - The remote node always runs beside the desk (one local gateway socket and an idle relay loop until a
#   relay is configured), so `harness pair` works against a running daemon. Through it, members on paired
#   machines send their `team` frames here (answered as a local connection would, never with owner
#   authority), and this machine's desk reports notices of teams owned elsewhere back to their owners.
# - A handler that loses its client keeps waiting (shielded), so a disconnect never cancels or repeats work.
# - Every connection runs behind the listener guard (io/listeners.py): a fault or hostile frame of one
#   connection closes that connection and is counted; it never reaches the daemon's nurseries.
# - Shutdown stops intake first, then lets every queued command become durable before the stores close.
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import json
import math
import os
import secrets
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from harness.core import delivery as d
from harness.core.codec import (
    command_from_json,
    command_to_json,
    exchange_view,
    from_json,
    member_view,
    team_summary,
    team_view,
    to_json,
)
from harness.core.commands import (
    AddMember,
    ArchiveTeam,
    Ask,
    Cancel,
    CreateTeam,
    NewMember,
    PauseTeam,
    RecordDelivery,
    RemoveMember,
    Reply,
    ResumeTeam,
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
    notice_id,
)
from harness.core.errors import ErrorCode, Rejected
from harness.core.invariants import step_violations as team_step_violations
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted, reject
from harness.core.queries import (
    decide_wait,
    delivery_view,
    inbox,
    reader,
    status,
    visible_exchange,
    waiter_for,
)
from harness.core.records import (
    EMPTY_LEDGER,
    Exchange,
    Ledger,
    Membership,
    NoticeKind,
    QuestionState,
    Team,
    TeamState,
)
from harness.core.remote_grant import observable
from harness.core.system import (
    AtDesk,
    NoticeContent,
    System,
    answer_retrieved_action,
    desk_command,
    inbox_read_action,
    notice_content,
)
from harness.core.team import next_deadline, resolve_member, restatement, step
from harness.io import home as homes
from harness.io.agents import REGISTRY_FILE, AgentError, AgentRegistry, entry_view
from harness.io.desk_runner import DeskRunner, RunnerTiming
from harness.io.journal import (
    CheckpointPolicy,
    CorruptState,
    JournalStore,
    Recovery,
    StoreError,
    ledger_store_dir,
    ledgers_dir,
)
from harness.io.listeners import (
    Listener,
    ListenerLimits,
    Slot,
    close_websocket,
    local_listener,
    raise_open_files_limit,
)
from harness.io.local_socket import same_user
from harness.io.remote import (
    RemoteNode,
    RemoteRefused,
    RemoteUnavailable,
    RemoteUncertain,
    TeamAnswer,
    attach_remote,
)
from harness.io.rpc import (
    ACTIONS,
    BAD_REQUEST,
    FEATURES,
    HARD_FRAME_BYTES,
    PROTOCOL,
    PROTOCOL_REVISION,
    FrameError,
    Request,
    error_frame,
    parse_request,
    result_frame,
    snapshot_frame,
)
from harness.io.team_delivery import (
    DeliveryReport,
    OwnerRequest,
    TeamDelivery,
    command_prefix,
)
from harness.io.team_delivery import request as delivery_request
from harness.io.terminal_port import Terminals

LIMITS_ENV = "HARNESS_LIMITS"
# "1": after every step, run the same invariant functions as the stateful tests and the model checker (the
# ledger's here, the desk's in the desk runner) and stop on the first violation. The test suite sets it.
CHECK_ENV = "HARNESS_CHECK_INVARIANTS"


def checking_invariants() -> bool:
    return os.environ.get(CHECK_ENV) == "1"


# Commands waiting for the ledger task before RPC handlers feel back-pressure.
LEDGER_QUEUE = 64
# Commands stepped but not yet durable; bounds the memory a burst can pin and the work a crash can lose.
PIPELINE_DEPTH = 256
# Requests one connection may have in flight (waits and subscriptions included); more stop its reads.
CONNECTION_REQUESTS = 16
DEFAULT_WAIT_SECONDS = 30.0
MAX_WAIT_SECONDS = 3600.0
ID_BYTES = 16
KEY_BYTES = 24

E = ErrorCode


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def draw_id() -> str:
    return secrets.token_hex(ID_BYTES)


def limits_from_env() -> Limits:
    """HARNESS_LIMITS='{"pendingPerSender": 2, ...}' shrinks bounds (tests); camelCase Limits fields."""
    raw = os.environ.get(LIMITS_ENV)
    if not raw:
        return DEFAULT_LIMITS
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"{LIMITS_ENV} is not JSON: {error}") from None
    limits = from_json(data, Limits)
    if isinstance(limits, Rejected):
        raise ValueError(f"{LIMITS_ENV}: {limits.detail}")
    return limits


class ActionError(Exception):
    """A request the daemon answers with an error frame (a protocol error, not a daemon fault)."""

    def __init__(
        self, code: str, detail: str, operation_id: str | None = None, bound: str | None = None
    ) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail if bound is None else f"{detail} (bound {bound})"
        self.operation_id = operation_id
        self.bound = bound


def _error(rejected: Rejected, operation_id: str | None = None) -> ActionError:
    return ActionError(rejected.code.value, rejected.detail, operation_id, rejected.bound)


@attrs.define
class Pending:
    """One command on its way through the ledger task and the finisher."""

    command: TeamCommand
    done: trio.Event = attrs.Factory(trio.Event)
    outcome: Accepted[Ledger] | Rejected | None = None
    persisted: trio.Event | None = None  # set when the journal append finished (None: nothing to persist)
    seq: int = 0
    failure: BaseException | None = None


# A request for the destination on this machine id, or (None) for every destination.
DeliveryWork = tuple[str | None, OwnerRequest]
# While a paired machine's frame is answered: that machine, and the desk commands its request meant for it.
_CARRIED: contextvars.ContextVar[tuple[str, list[OwnerRequest]] | None] = contextvars.ContextVar(
    "carried", default=None
)
# The reason an owner shows for a notice to a machine it has no route to (not paired, or no relay yet).
UNPAIRED = "unpaired"


def _observer(request: Request) -> str | None:
    """The paired machine whose owner reads through this request (a carried frame without a member key),
    or None for a local caller or a member."""
    carrier = _CARRIED.get()
    return carrier[0] if carrier is not None and request.member_key is None else None


def _with_team(ledger: Ledger, team_id: str, team: Team | None) -> Ledger:
    if team is None:
        return Ledger(ledger.teams.delete(team_id)) if team_id in ledger.teams else ledger
    return Ledger(ledger.teams.set(team_id, team))


class ReplayError(Exception):
    pass


def replay(team_id: str, recovery: Recovery, limits: Limits) -> tuple[Team | None, int]:
    """Rebuild one team from its checkpoint and journal; also the latest command time seen."""
    ledger = EMPTY_LEDGER
    if recovery.checkpoint is not None:
        team = from_json(recovery.checkpoint, Team)
        if isinstance(team, Rejected):
            raise ReplayError(f"checkpoint {recovery.checkpoint_seq} is not a team: {team.detail}")
        ledger = _with_team(ledger, team_id, team)
    last_at = 0
    for entry in recovery.entries:
        command = command_from_json(entry.body)
        if isinstance(command, Rejected):
            raise ReplayError(f"journal entry {entry.seq} is not a command: {command.detail}")
        if command.team_id != team_id:
            raise ReplayError(f"journal entry {entry.seq} belongs to team {command.team_id!r}")
        outcome = step(ledger, command, limits)
        if isinstance(outcome, Rejected):
            raise ReplayError(
                f"journal entry {entry.seq} was refused on replay ({outcome.code}: {outcome.detail}); "
                f"were the limits ({LIMITS_ENV}) changed since it was accepted?"
            )
        ledger = outcome.state
        last_at = max(last_at, command.at)
    return ledger.teams.get(team_id), last_at


class Daemon:
    """One daemon per data directory. `await nursery.start(daemon.run)` returns once it listens."""

    def __init__(
        self,
        home: Path,
        *,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], int] = now_ms,
        checkpoint_policy: CheckpointPolicy | None = None,
        terminals: Callable[[AgentRegistry], Terminals] | None = None,
        runner_timing: RunnerTiming | None = None,
        remote: Callable[[Path], RemoteNode] | None = None,
        log: Callable[[str], None] | None = None,
        listener_limits: ListenerLimits | None = None,
    ) -> None:
        self.home = home
        self.limits = limits
        self.clock = clock
        self.socket_path = home / homes.SOCKET_FILE
        self.machine_id = ""
        self._started_at = now_ms()
        self._faults = 0  # faults of the daemon outside a connection (a broken invariant, a remote frame)
        self._checkpoints = checkpoint_policy or CheckpointPolicy()
        self._terminals = terminals
        self._runner_timing = runner_timing or RunnerTiming()
        self._check = checking_invariants()
        self.agents = AgentRegistry(home / REGISTRY_FILE)  # loaded in `run`
        self.desk: DeskRunner | None = None  # this machine's delivery desk, opened in `run`
        self._log = log or (lambda line: print(f"harness daemon: {line}", file=sys.stderr, flush=True))
        self.rpc = Listener(
            "rpc", listener_limits or ListenerLimits(), self._log, peer_ok=lambda s: same_user(s.socket)
        )
        # Built in `run`, once the data directory exists (tests pass faster reconnects).
        self._new_node = remote or (
            lambda home: RemoteNode(home, log=self._log, listener_limits=self.rpc.limits)
        )
        self.node: RemoteNode | None = None
        self._token = ""
        self.working: Ledger = EMPTY_LEDGER  # stepped, maybe not yet durable: only the ledger task reads it
        self.durable: Ledger = EMPTY_LEDGER  # what readers see
        self.stores: dict[str, JournalStore] = {}
        self.unavailable: dict[str, str] = {}  # team id -> why it is stopped (corrupt or failed store)
        self._changed: dict[str, trio.Event] = {}
        # (team, membership) -> the open questions to it last shown in an inbox or wait reply: read before its
        # desk's report reaches the ledger (or when it never does: an unpaired machine). Memory only: after a
        # restart a wait breaks once more on them, the safe side.
        self._shown: dict[tuple[str, str], frozenset[str]] = {}
        self._timers: dict[str, int] = {}
        self._timers_changed = trio.Event()
        self._last_at = 0
        self._send, self._receive = trio.open_memory_channel[Pending](LEDGER_QUEUE)
        # Unbounded on purpose: the finisher must never wait for the delivery worker, which itself sends
        # reports back into the ledger queue; a bound here could close that loop into a deadlock.
        self._work_send, self._work_receive = trio.open_memory_channel[DeliveryWork](math.inf)
        self._stop_scope: trio.CancelScope | None = None
        self._stop_requested = False

    @property
    def internal_errors(self) -> int:
        """Faults of harness met while serving (bugs); the tests assert it stays 0."""
        gateway = 0 if self.node is None else self.node.gateway.stats.internal_errors
        return self._faults + self.rpc.stats.internal_errors + gateway

    # --- lifecycle ----------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop taking requests; queued work still becomes durable before `run` returns."""
        self._stop_requested = True
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        homes.ensure_home(self.home)
        lock_fd = homes.lock_home(self.home)
        raise_open_files_limit()
        try:
            self._token = homes.owner_token(self.home)
            self.machine_id = homes.machine_id(self.home)
            self.agents = AgentRegistry.load(self.home)
            if self.agents.unavailable is not None:
                self._log(f"agent registry: {self.agents.unavailable}")
            self.node = self._new_node(self.home)
            # Now, not only in attach_remote: the desk reports as it opens, about teams owned here too.
            self.node.report_local = self.report
            self.node.owns_team = lambda team_id: team_id in self.working.teams
            self.node.content_of = self._content_of
            self.node.limits = self.limits
            self.desk = DeskRunner(
                self.home,
                self.machine_id,
                self.node.route_report,  # reports about teams owned elsewhere go back to their owner
                None if self._terminals is None else self._terminals(self.agents),
                limits=self.limits,
                clock=self.clock,
                timing=self._runner_timing,
                checkpoint_policy=self._checkpoints,
                log=self._log,
                on_violation=partial(self._violated, "a desk command") if self._check else None,
            )
            await self._recover()
            try:
                await self._serve(task_status)
            finally:
                with trio.CancelScope(shield=True):
                    for store in self.stores.values():
                        await store.aclose()
                    homes.remove_daemon_info(self.home, os.getpid())
                    with contextlib.suppress(FileNotFoundError):
                        self.socket_path.unlink()  # ours: the lock is still held
        finally:
            os.close(lock_fd)

    async def _serve(self, task_status: trio.TaskStatus[Daemon]) -> None:
        tickets_send, tickets_receive = trio.open_memory_channel[Pending](PIPELINE_DEPTH)
        async with trio.open_nursery() as core:
            core.start_soon(self._ledger_task, tickets_send, core)
            core.start_soon(self._finisher, tickets_receive)
            assert self.desk is not None and self.node is not None
            await core.start(self.desk.run)
            self.node.on_paired = self._restate
            self._restate()
            await core.start(attach_remote, self, self.node)
            core.start_soon(self._delivery_worker)
            with trio.CancelScope() as self._stop_scope:
                if self._stop_requested:
                    self._stop_scope.cancel()
                async with trio.open_nursery() as front:
                    listener = local_listener(self.socket_path)
                    handler = self.rpc.websockets(self._connection, HARD_FRAME_BYTES)
                    await front.start(self.rpc.serve, listener, handler)
                    homes.write_private_json(self.home / homes.DAEMON_FILE, self.info())
                    front.start_soon(self._timer_task)
                    self._log(f"listening on {self.socket_path} (pid {os.getpid()})")
                    task_status.started(self)
            # Intake is closed: the ledger drains its queue, then the finisher and the delivery worker theirs.
            # Peers' requests would only be refused now, and notices still in its outboxes are owed in the
            # durable ledger, so the remote node stops at once.
            await self._send.aclose()
            self.node.stop()
        self._log("stopped; every accepted command is durable")

    def info(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "socket": str(self.socket_path),
            "startedAt": self._started_at,
            "machineId": self.machine_id,
            "protocol": PROTOCOL,
            "protocolRevision": PROTOCOL_REVISION,
        }

    async def _recover(self) -> None:
        root = ledgers_dir(self.home)
        names = sorted(os.listdir(root)) if root.is_dir() else []
        for team_id in names:
            directory = root / team_id
            if not directory.is_dir():
                continue
            try:
                store, recovery = await JournalStore.open(directory)
            except CorruptState as error:
                self._stop_team(team_id, f"{E.CORRUPT_STATE}: {error}")
                continue
            try:
                team, last_at = replay(team_id, recovery, self.limits)
            except ReplayError as error:
                await store.aclose()
                self._stop_team(team_id, f"{E.CORRUPT_STATE}: {directory}: {error}")
                continue
            self.stores[team_id] = store
            self._last_at = max(self._last_at, last_at)
            if team is not None:
                self.durable = _with_team(self.durable, team_id, team)
                deadline = next_deadline(team)
                if deadline is not None:
                    self._timers[team_id] = deadline
        self.working = self.durable

    def _violated(self, what: str, violation: tuple[str, str]) -> str:
        """A core invariant broken (CHECK_ENV): a bug of harness, counted and logged; the caller stops."""
        self._faults += 1
        why = f"{ErrorCode.CORRUPT_STATE}: invariant {violation[0]} broken by {what}: {violation[1]}"
        self._log(why)
        return why

    def _stop_team(self, team_id: str, why: str) -> None:
        self.unavailable[team_id] = why
        self._log(f"team {team_id} stopped: {why}")

    # --- the ledger task, the journal and the finisher ------------------------------------------------------

    async def _ledger_task(self, tickets: trio.MemorySendChannel[Pending], nursery: trio.Nursery) -> None:
        async with tickets:
            async for pending in self._receive:
                await self._step(pending, nursery)
                await tickets.send(pending)

    async def _step(self, pending: Pending, nursery: trio.Nursery) -> None:
        self._last_at = max(self._last_at, self.clock())
        command = pending.command = attrs.evolve(pending.command, at=self._last_at)
        team_id = command.team_id
        if team_id in self.unavailable:
            pending.outcome = reject(E.CORRUPT_STATE, self.unavailable[team_id])
            return
        outcome = pending.outcome = step(self.working, command, self.limits)
        broken = team_step_violations(self.working, command, outcome, self.limits) if self._check else []
        if broken:  # never applied: the team stops, as for a ledger that cannot be written
            why = self._violated(f"{type(command).__name__} on team {team_id!r}", broken[0])
            self._stop_team(team_id, why)
            pending.outcome = reject(E.CORRUPT_STATE, why)
            return
        if isinstance(outcome, Rejected) or not outcome.changed:
            return
        store = self.stores.get(team_id)
        if store is None:  # only a new team's create gets here
            try:
                store, _ = await JournalStore.open(ledger_store_dir(self.home, team_id))
            except (StoreError, OSError) as error:
                detail = f"cannot open the ledger of team {team_id!r}: {error}"
                pending.outcome = reject(E.CORRUPT_STATE, detail)
                return
            self.stores[team_id] = store
        # Per team: the store open above may have let the finisher revert another team meanwhile.
        self.working = _with_team(self.working, team_id, outcome.state.teams[team_id])
        pending.persisted = trio.Event()
        await nursery.start(self._persist, store, command_to_json(command), pending)

    async def _persist(
        self, store: JournalStore, entry: dict[str, Any], pending: Pending, task_status: trio.TaskStatus[None]
    ) -> None:
        # `started()` does not yield, and `append` takes its sequence number before its first checkpoint, so
        # journal order is exactly the order in which the ledger task stepped the commands.
        task_status.started()
        try:
            pending.seq = await store.append(entry)
        except (StoreError, trio.ClosedResourceError, ValueError, TypeError) as error:
            pending.failure = error
        finally:
            assert pending.persisted is not None
            pending.persisted.set()

    async def _finisher(self, tickets: trio.MemoryReceiveChannel[Pending]) -> None:
        async with self._work_send:
            async for pending in tickets:
                team_id = pending.command.team_id
                checkpoint = False
                if pending.persisted is not None:
                    await pending.persisted.wait()
                    if pending.failure is not None:
                        self._fail_team(team_id, pending.failure)
                    else:
                        checkpoint = self._commit(pending)
                if team_id in self.unavailable:
                    # Stepped on state that never became durable: the only honest answer is the failure.
                    pending.outcome = reject(E.CORRUPT_STATE, self.unavailable[team_id])
                pending.done.set()
                if checkpoint:
                    await self._checkpoint(team_id, pending.seq)

    def _commit(self, pending: Pending) -> bool:
        outcome = pending.outcome
        assert isinstance(outcome, Accepted)
        team_id = pending.command.team_id
        team = outcome.state.teams[team_id]
        self.durable = _with_team(self.durable, team_id, team)
        if isinstance(pending.command, RemoveMember) and outcome.changed:
            # Its key is revoked in the ledger; the file that held it for its introduction goes too.
            homes.remove_member_key(self.home, team_id, pending.command.membership_id)
        for effect in outcome.effects:
            if isinstance(effect, ArmTimer):
                self._arm(team_id, effect.at)
            elif isinstance(
                effect, SubmitNotice | WithdrawNotice | HoldTeam | ReleaseTeam | WithdrawTeam | WithdrawMember
            ):
                prefix = partial(self._command_prefix, outcome.state)
                command = desk_command(outcome.state, effect, pending.command.at, self.limits, prefix)
                machine = command.machine_id if isinstance(command, d.Submit) else None
                self._work_send.send_nowait((machine, command))
        event = self._changed.pop(team_id, None)
        if event is not None:
            event.set()
        return self._checkpoints.due(self.stores[team_id])

    async def _checkpoint(self, team_id: str, seq: int) -> None:
        # Called right after entry `seq` was committed, so the durable team is exactly the state after it
        # (later entries may already be on disk; the journal allows a checkpoint behind its durable end).
        team = self.durable.teams.get(team_id)
        store = self.stores.get(team_id)
        if team is None or store is None or team_id in self.unavailable:
            return
        try:
            await store.checkpoint(seq, to_json(team))
        except StoreError as error:
            self._fail_team(team_id, error)

    def _fail_team(self, team_id: str, error: BaseException) -> None:
        self._stop_team(
            team_id,
            f"the ledger of team {team_id!r} could not be written ({error}); it is stopped until the daemon "
            "restarts. The last request may or may not have been recorded: retry it with the same "
            "operation id",
        )
        self.working = _with_team(self.working, team_id, self.durable.teams.get(team_id))
        event = self._changed.pop(team_id, None)
        if event is not None:
            event.set()

    async def submit(self, command: TeamCommand) -> Accepted[Ledger] | Rejected:
        """Send a command to the ledger and wait for its durable outcome. Shielded: once sent, it finishes."""
        pending = Pending(command)
        with trio.CancelScope(shield=True):
            try:
                await self._send.send(pending)
            except trio.ClosedResourceError:
                detail = "the daemon is shutting down; retry after it restarts"
                raise ActionError(E.OFFLINE.value, detail) from None
            await pending.done.wait()
        assert pending.outcome is not None
        return pending.outcome

    # --- timers and delivery --------------------------------------------------------------------------------

    def _arm(self, team_id: str, at: int) -> None:
        self._timers[team_id] = at
        self._timers_changed.set()

    async def _timer_task(self) -> None:
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

    async def report(self, report: DeliveryReport) -> None:
        """Record a destination's report (this desk's, or a paired machine's) in the owner ledger."""
        command = RecordDelivery(0, report.team_id, report.notice_id, report.state, report.reason)
        # Shutting down: a lost observation is one the destination reports again after the restart.
        with contextlib.suppress(trio.ClosedResourceError):
            await self._send.send(Pending(command))

    def _restate(self, machine: str | None = None) -> None:
        """Tell destinations again what the ledgers say they must have (core `restatement`): on start every
        destination, and a machine paired since start (`machine`) its notices, until now owed `unpaired`.

        A crash can fall between a ledger change made durable and a destination's durable receipt of any of
        its effects (a submit, a withdrawal, a hold). Every desk command is idempotent, so restating what a
        desk has changes nothing there; paired machines get theirs in few sealed requests."""
        assert self.desk is not None and self.node is not None
        at = self.clock()
        held = self.desk.desk.notices
        remote: dict[str, list[OwnerRequest]] = {}
        for team_id, team in self.durable.teams.items():
            if team_id in self.unavailable:
                continue
            prefix = partial(self._command_prefix, self.durable)
            commands = [
                desk_command(self.durable, effect, at, self.limits, prefix)
                for effect in restatement(team, self.limits)
            ]
            submitted = {c.machine_id for c in commands if isinstance(c, d.Submit)} - {self.machine_id}
            team_wide = sorted(submitted.union(self.node.holders(team_id)))
            for command in commands:
                if not isinstance(command, d.Submit):
                    if machine is None:
                        self._work_send.send_nowait((self.machine_id, command))  # the local desk only
                    for other in team_wide:
                        remote.setdefault(other, []).append(command)
                elif command.machine_id == self.machine_id:
                    if machine is None and command.notice_id not in held:
                        self._work_send.send_nowait((self.machine_id, command))
                else:
                    remote.setdefault(command.machine_id, []).append(command)
        for other, owed in remote.items():
            if machine is not None and other != machine:
                continue
            if self.node.peer(other) is not None:
                self.node.restate(other, owed)
            else:  # no route: its notices show `queued`, reason `unpaired`, until it is paired
                for request in owed:
                    if isinstance(request, d.Submit) and self._never_left(request):
                        self._work_send.send_nowait((other, request))

    def _never_left(self, submit: d.Submit) -> bool:
        """Whether the owner's view of a notice says it never got past `queued` (a later state, reported by
        a machine since unpaired, is still the truest word on it)."""
        team = self.durable.teams.get(submit.team_id)
        view = None if team is None else delivery_view(team, submit.notice_id)
        return view is None or view.state == d.DeliveryState.QUEUED.value

    def _destination(self, machine_id: str | None) -> TeamDelivery | None:
        """Where a request for `machine_id` goes; None: no route to that machine (not paired)."""
        if machine_id is None or machine_id == self.machine_id:
            return self.desk
        return None if self.node is None else self.node.destination(machine_id)

    async def _delivery_worker(self) -> None:
        async for machine_id, command in self._work_receive:
            destination = self._destination(machine_id)
            if destination is not None:
                if (
                    isinstance(command, d.Submit)
                    and self.node is not None
                    and machine_id not in self.node.holders(command.team_id)
                ):
                    team = self.durable.teams.get(command.team_id)
                    if team is not None and team.state is TeamState.PAUSED:
                        # A machine new to a paused team gets its hold first, so nothing is written; one
                        # that holds the team already was told by the pause itself (fan-out).
                        await delivery_request(destination, d.Hold(command.at, command.team_id))
                await delivery_request(destination, command)
            elif isinstance(command, d.Submit):  # owed, visibly waiting for a route to its machine
                queued = d.DeliveryState.QUEUED.value
                await self.report(DeliveryReport(command.team_id, command.notice_id, queued, UNPAIRED))
            if machine_id is None and self.node is not None:  # team-wide: paired desks holding its notices
                await self.node.fan_out(command)
        # Every request of an accepted command was handed over; now the desk may stop looking.
        if self.desk is not None:
            self.desk.stop()

    # --- connections ----------------------------------------------------------------------------------------

    async def _connection(self, ws: WebSocketConnection, slot: Slot) -> None:
        slots = trio.Semaphore(CONNECTION_REQUESTS)
        async with trio.open_nursery() as nursery:
            try:
                while True:
                    message = await ws.get_message()
                    slot.touch()
                    await slots.acquire()
                    nursery.start_soon(self._one_request, ws, message, slots, slot)
            except ConnectionClosed:
                pass
            # The client is gone: waits and subscriptions end; shielded submissions still finish.
            nursery.cancel_scope.cancel()

    async def _one_request(
        self, ws: WebSocketConnection, message: str | bytes, slots: trio.Semaphore, slot: Slot
    ) -> None:
        try:
            with slot.working():  # a request in flight (a wait, a subscription) keeps its connection open
                frame = await self._answer(ws, message)
                if frame is not None:
                    await ws.send_message(frame)
        except ConnectionClosed:
            pass
        except Exception:
            # A fault of this daemon, not of the request: close this one connection and keep serving.
            self.rpc.fault()
            await close_websocket(ws, 1011, "internal error")
        finally:
            slots.release()

    async def answer_frame(self, message: str, origin: str) -> TeamAnswer:
        """One `team` frame from a member on paired machine `origin` (the remote node strips owner tokens),
        with the reads it made moot on `origin`'s desk, which travel with the reply. A fault of this daemon is
        not raised, which would take the remote node and the daemon down: a reply of None says that no
        answer exists, and the member's CLI reports the outcome as uncertain, as for a local connection."""
        carried: list[OwnerRequest] = []
        token = _CARRIED.set((origin, carried))
        try:
            reply = await self._answer(None, message)
        except Exception:
            self._faults += 1
            self._log("internal error while serving a remote request:\n" + traceback.format_exc())
            reply = None
        finally:
            _CARRIED.reset(token)
        return TeamAnswer(reply, tuple(carried))

    async def _answer(self, ws: WebSocketConnection | None, message: str | bytes) -> str | None:
        """The reply frame to one request; `ws` is None for remote frames, which cannot subscribe."""
        try:
            request = parse_request(message)
        except FrameError as error:
            if ws is not None:
                self.rpc.stats.refused_frames += 1
            return error_frame(error.request_id, BAD_REQUEST, error.detail)
        try:
            if request.action == "subscribe":
                if ws is None:
                    raise ActionError(BAD_REQUEST, "subscribe needs a connection to the owner's daemon")
                await self._subscribe(ws, request)
                return None
            return result_frame(request.request_id, await self._dispatch(request))
        except FrameError as error:
            return error_frame(request.request_id, BAD_REQUEST, error.detail)
        except ActionError as error:
            return error_frame(request.request_id, error.code, error.detail, error.operation_id, error.bound)

    # --- actions --------------------------------------------------------------------------------------------

    def _authorize(self, request: Request) -> None:
        if request.member_key is not None:
            if ACTIONS[request.action].owner_only:
                raise ActionError(E.UNAUTHORIZED.value, f"'{request.action}' is an owner operation")
            return
        token = request.owner_token
        if token is None or not hmac.compare_digest(token.encode(), self._token.encode()):
            raise ActionError(
                E.UNAUTHORIZED.value,
                "owner requests need the owner token of the daemon's data directory; "
                "members send their memberKey",
            )

    async def _dispatch(self, request: Request) -> object:
        if request.action == "capabilities":
            return self.capabilities()
        self._authorize(request)
        handler = getattr(self, f"_action_{request.action}")
        result: object = await handler(request)
        return result

    def capabilities(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "protocolRevision": PROTOCOL_REVISION,
            "actions": sorted(ACTIONS),
            "features": list(FEATURES),
            "machineId": self.machine_id,
            "limits": to_json(self.limits),
        }

    def _team(self, request: Request) -> Team:
        team_id = request.team_id
        assert team_id is not None
        observer = _observer(request)
        if team_id in self.unavailable and observer is None:
            raise ActionError(E.CORRUPT_STATE.value, self.unavailable[team_id])
        team = self.durable.teams.get(team_id)
        if team is None or (observer is not None and not observable(team, observer)):
            raise ActionError(E.NOT_FOUND.value, f"no team {team_id!r}")
        return team

    def _viewer(self, team: Team, request: Request) -> Membership | None:
        viewer = reader(team, request.member_key)
        if isinstance(viewer, Rejected):
            raise _error(viewer)
        return viewer

    async def _run(self, command: TeamCommand, operation_id: str | None = None) -> object:
        outcome = await self.submit(command)
        if isinstance(outcome, Rejected):
            raise _error(outcome, operation_id)
        return outcome.result

    def _member_ref(self, request: Request, ref: str | None) -> str | None:
        """A membership id for `ref`, which people may give as an active member's name."""
        team = self.durable.teams.get(self._team_id(request))
        member = None if team is None or ref is None else resolve_member(team, ref)
        return member.id if member is not None else ref

    async def _action_list(self, request: Request) -> object:
        teams = sorted(self.durable.teams.values(), key=lambda team: (team.created_at, team.id))
        observer = _observer(request)
        if observer is not None:  # a paired machine's owner: the teams it has a member in, nothing else
            teams = [team for team in teams if observable(team, observer)]
        unavailable = {} if observer is not None else self.unavailable
        return {
            "teams": [team_summary(team) for team in teams],
            "unavailable": [
                {"id": team_id, "error": E.CORRUPT_STATE.value, "detail": why}
                for team_id, why in sorted(unavailable.items())
            ],
        }

    def _new_member(self, data: dict[str, Any], operation_id: str | None, default_id: str) -> NewMember:
        allowed = {"id", "machineId", "agentId", "name", "role"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            detail = f"a member has no field {', '.join(map(repr, unknown))}"
            raise ActionError(BAD_REQUEST, detail, operation_id)
        values: dict[str, str] = {}
        for name in ("machineId", "agentId", "name"):
            value = data.get(name)
            if not isinstance(value, str):
                raise ActionError(BAD_REQUEST, f"a member needs a string '{name}'", operation_id)
            values[name] = value
        member_id, role = data.get("id"), data.get("role", "")
        if not isinstance(member_id, str | None) or not isinstance(role, str):
            raise ActionError(BAD_REQUEST, "a member's 'id' and 'role' are strings", operation_id)
        return NewMember(
            member_id or default_id,
            values["machineId"],
            values["agentId"],
            values["name"],
            role,
            secrets.token_hex(KEY_BYTES),
        )

    async def _action_create(self, request: Request) -> object:
        team_id = request.opt_text("id") or draw_id()
        # A member without an id gets one derived from the team id, so retrying an uncertain create with the
        # same team id and file is recognised as the same create.
        members = tuple(
            self._new_member(data, team_id, hashlib.sha256(f"{team_id}/{index}".encode()).hexdigest()[:16])
            for index, data in enumerate(request.object_list("members"))
        )
        if team_id in self.unavailable:
            raise ActionError(E.CORRUPT_STATE.value, self.unavailable[team_id], team_id)
        team = await self._run(CreateTeam(0, team_id, request.text("name"), members), team_id)
        assert isinstance(team, Team)
        return team_view(team)

    async def _action_get(self, request: Request) -> object:
        return team_view(self._team(request))

    async def _action_members(self, request: Request) -> object:
        team = self._team(request)
        self._viewer(team, request)
        return {
            "teamId": team.id,
            "revision": team.revision,
            "members": [member_view(team.members[member_id]) for member_id in team.member_order],
        }

    async def _action_add(self, request: Request) -> object:
        member = self._new_member(dict(request.fields), None, draw_id())
        result = await self._run(AddMember(0, self._team_id(request), member), member.id)
        assert isinstance(result, Membership)
        return member_view(result)

    async def _action_remove(self, request: Request) -> object:
        member_id = self._member_ref(request, request.text("memberId"))
        assert member_id is not None
        result = await self._run(RemoveMember(0, self._team_id(request), member_id))
        assert isinstance(result, Membership)
        return member_view(result)

    async def _action_key(self, request: Request) -> object:
        team = self._team(request)
        member_id = request.text("memberId")
        member = resolve_member(team, member_id)
        key = None if member is None else next((k for k, m in team.keys.items() if m == member.id), None)
        if member is None or key is None:
            raise ActionError(E.NOT_FOUND.value, f"no active member {member_id!r} in team {team.id!r}")
        command = self._command_prefix(self.durable, team.id, key)
        local = member.machine_id == self.machine_id
        key_file = str(homes.member_key_path(self.home, team.id, member.id)) if local else None
        return {
            "teamId": team.id,
            "memberId": member.id,
            "name": member.name,
            "memberKey": key,
            "keyFile": key_file,
            "command": command,
        }

    def _content_of(self, submit: d.Submit) -> NoticeContent | None:
        """What a notice owed to a paired machine's agent says, from the ledger (None: its team is gone)."""
        team = self.durable.teams.get(submit.team_id)
        if team is None or self.unavailable.get(submit.team_id):
            return None
        return notice_content(self.durable, submit)

    def _command_prefix(self, ledger: Ledger, team_id: str, member_key: str) -> str:
        """The shell prefix a member's introduction teaches: for a member on this machine, this data directory
        and the member's key file, written (durably) here before the prefix can reach any desk; a member on a
        paired machine calls its own daemon, which carries the call here (`--machine`)."""
        team = ledger.teams.get(team_id)
        member_id = None if team is None else team.keys.get(member_key)
        member = None if team is None or member_id is None else team.members.get(member_id)
        if member is None:  # a revoked key (core passes "REVOKED"): there is no file to name
            return command_prefix(self.home, team_id, Path("REVOKED"))
        if member.machine_id != self.machine_id:
            # Its machine renders the introduction itself and keeps the key in a file of its own
            # (io/remote.py); what the owner can say is the form, with that file to be named there.
            return f"harness team --machine {self.machine_id} --team {team_id} --key-file KEY_FILE"
        try:
            key_file = homes.write_member_key(self.home, team_id, member.id, member_key)
        except OSError as error:  # the next start writes it again (restatement asks for every prefix)
            key_file = homes.member_key_path(self.home, team_id, member.id)
            self._log(f"cannot write the key file {key_file}: {error}")
        return command_prefix(self.home, team_id, key_file)

    async def _lifecycle(self, command: TeamCommand) -> object:
        team = await self._run(command)
        assert isinstance(team, Team)
        return team_view(team)

    async def _action_pause(self, request: Request) -> object:
        return await self._lifecycle(PauseTeam(0, self._team_id(request)))

    async def _action_resume(self, request: Request) -> object:
        return await self._lifecycle(ResumeTeam(0, self._team_id(request)))

    async def _action_archive(self, request: Request) -> object:
        return await self._lifecycle(ArchiveTeam(0, self._team_id(request)))

    def _team_id(self, request: Request) -> str:
        assert request.team_id is not None
        return request.team_id

    async def _action_ask(self, request: Request) -> object:
        question_id = request.opt_text("id") or draw_id()
        notify = request.opt_bool("notify")
        command = Ask(
            0,
            self._team_id(request),
            question_id,
            request.text("to"),
            request.text("text"),
            context=request.opt_text("context"),
            ttl_ms=request.opt_int("ttlMs"),
            parent_id=request.opt_text("parentId"),
            notify=True if notify is None else notify,
            from_=request.opt_text("from"),
            member_key=request.member_key,
        )
        exchange = await self._run(command, question_id)
        assert isinstance(exchange, Exchange)
        return exchange_view(exchange)

    async def _action_reply(self, request: Request) -> object:
        command = Reply(
            0,
            self._team_id(request),
            request.text("questionId"),
            request.text("text"),
            evidence=request.text_list("evidence"),
            member_id=self._member_ref(request, request.opt_text("memberId")),
            member_key=request.member_key,
        )
        exchange = await self._run(command)
        assert isinstance(exchange, Exchange)
        return exchange_view(exchange)

    async def _action_cancel(self, request: Request) -> object:
        command = Cancel(0, self._team_id(request), request.text("questionId"), member_key=request.member_key)
        exchange = await self._run(command)
        assert isinstance(exchange, Exchange)
        return exchange_view(exchange)

    def _tell_desk(self, action: AtDesk | None) -> None:
        """A member's read makes unsent notices moot; its machine's desk learns it (after the read)."""
        if action is None:
            return
        command = action.command
        assert isinstance(command, d.InboxRead | d.AnswerRetrieved)
        carrier = _CARRIED.get()
        if carrier is not None and carrier[0] == action.machine_id:
            carrier[1].append(command)  # also with the reply to the member's machine (answer_frame)
        with contextlib.suppress(trio.ClosedResourceError):  # shutting down: the notices stay queued
            self._work_send.send_nowait((action.machine_id, command))

    async def _action_inbox(self, request: Request) -> object:
        team = self._team(request)
        viewer = self._viewer(team, request)
        if viewer is None:  # the owner sees every open question and the latest answers of the team
            everything = status(team, None)
            questions = tuple(e for e in everything if e.state is QuestionState.OPEN)
            answered = sorted((e for e in everything if e.answer is not None), key=lambda e: -_answered_at(e))
            answers = tuple(answered[: self.limits.recent_answers])
        else:
            box = inbox(team, viewer, self.limits)
            questions, answers = box.questions, box.answers
            self._shown[(team.id, viewer.id)] = frozenset(e.id for e in questions)
            self._tell_desk(inbox_read_action(System(self.durable), team.id, viewer.id, self.clock()))
        return {
            "teamId": team.id,
            "revision": team.revision,
            "questions": [exchange_view(e) for e in questions],
            "answers": [exchange_view(e) for e in answers],
        }

    async def _action_status(self, request: Request) -> object:
        team = self._team(request)
        viewer = self._viewer(team, request)
        question_id = request.opt_text("questionId")
        if question_id is None:
            return {
                "teamId": team.id,
                "revision": team.revision,
                "exchanges": [exchange_view(e) for e in status(team, viewer)],
            }
        exchange = visible_exchange(team, viewer, question_id)
        if isinstance(exchange, Rejected):
            raise _error(exchange)
        if viewer is not None:
            self._answer_seen(team, viewer, exchange)
        return exchange_view(exchange)

    async def _action_delivery_check(self, request: Request) -> object:
        """Ask the destination's desk itself what became of a question's notice (or with notice "answer", of
        its continuation), through the relay for a member on a paired machine. What it says is recorded as
        its report, so a stale owner's view heals; nothing is ever sent again."""
        team = self._team(request)
        question_id = request.text("questionId")
        notice_kind = request.opt_text("notice") or NoticeKind.QUESTION.value
        if notice_kind not in (NoticeKind.QUESTION.value, NoticeKind.ANSWER.value):
            raise ActionError(BAD_REQUEST, f'notice is "question" or "answer", not {notice_kind!r}')
        kind = NoticeKind(notice_kind)
        exchange = team.exchanges.get(question_id)
        if exchange is None:
            raise ActionError(E.NOT_FOUND.value, f"no {kind} notice of question {question_id!r}")
        member = team.members[exchange.to if kind is NoticeKind.QUESTION else exchange.from_]
        notice = notice_id(team.id, exchange.id, kind)
        checked: dict[str, Any] = {"noticeId": notice, "machineId": member.machine_id}
        destination = self._destination(member.machine_id)
        if destination is None:
            return {**checked, "asked": False, "error": UNPAIRED, "detail": "that machine is not paired"}
        try:
            reports = await destination.status(team.id, [notice])
        except (RemoteUnavailable, RemoteRefused) as error:
            return {**checked, "asked": False, "error": error.code, "detail": error.detail}
        except RemoteUncertain as error:
            return {**checked, "asked": False, "error": "uncertain", "detail": str(error)}
        for report in reports:
            await self.report(report)
        held = next(iter(reports), None)
        delivery = None if held is None else {"state": held.state, "reason": held.reason}
        return {**checked, "asked": True, "held": held is not None, "delivery": delivery}

    def _answer_seen(self, team: Team, viewer: Membership, exchange: Exchange) -> None:
        """The asker retrieved the answer: its continuation notice, if still unsent, is no longer needed."""
        if exchange.from_ == viewer.id and exchange.answer is not None:
            self._tell_desk(answer_retrieved_action(System(self.durable), team.id, exchange.id, self.clock()))

    async def _action_wait(self, request: Request) -> object:
        seconds = request.opt_number("seconds")
        seconds = DEFAULT_WAIT_SECONDS if seconds is None else seconds
        if not 0 <= seconds <= MAX_WAIT_SECONDS:
            detail = f"wait seconds must be 0 to {MAX_WAIT_SECONDS:g}"
            raise ActionError(E.BOUND_EXCEEDED.value, detail, bound="wait_seconds")
        question_id = request.text("questionId")
        since = self.clock()
        until = since + round(seconds * 1000)
        while True:
            team = self._team(request)
            viewer = self._viewer(team, request)
            exchange = visible_exchange(team, viewer, question_id)
            if isinstance(exchange, Rejected):
                raise _error(exchange)
            waiter = waiter_for(team, viewer, exchange)
            seen = self._shown.get((team.id, waiter), frozenset())
            decision = decide_wait(team, waiter, exchange, self.clock(), until, since=since, seen=seen)
            if decision is not None:
                if viewer is not None:
                    self._answer_seen(team, viewer, decision.exchange)
                    if decision.incoming:  # the waiter read these questions in the reply
                        ids = tuple(notice_id(team.id, e.id, NoticeKind.QUESTION) for e in decision.incoming)
                        self._tell_desk(AtDesk(viewer.machine_id, d.InboxRead(self.clock(), ids)))
                        self._shown[(team.id, viewer.id)] = frozenset(e.id for e in decision.incoming)
                return {
                    "reason": decision.reason.value,
                    "exchange": exchange_view(decision.exchange),
                    "incoming": [exchange_view(e) for e in decision.incoming],
                    "news": list(decision.news),
                }
            changed = self._changed.setdefault(team.id, trio.Event())
            with trio.move_on_after(max(0, until - self.clock() + 1) / 1000):
                await changed.wait()

    # --- the agent registry (owner only) ------------------------------------------------------------------

    async def _action_agent_register(self, request: Request) -> object:
        limits = self.limits
        with _agent_errors():
            entry = await self.agents.register(
                request.fields, self.clock(), limits.id_chars, limits.name_chars
            )
        return entry_view(entry)

    async def _action_agent_list(self, request: Request) -> object:
        with _agent_errors():
            entries = self.agents.entries()
        return {"machineId": self.machine_id, "agents": [entry_view(entry) for entry in entries]}

    async def _action_agent_show(self, request: Request) -> object:
        with _agent_errors():
            entry = self.agents.show(request.text("agentId"))
        session = None if self.desk is None else self.desk.desk.sessions.get(entry.agent_id)
        delivery = None
        if session is not None:  # what the desk last saw of its terminal and what waits for it
            delivery = {
                "observed": None if session.observed is None else session.observed.value,
                "observedAt": session.observed_at,
                "queued": len(session.queue),
                "held": len(session.held),
                "writing": session.writing,
            }
        return {**entry_view(entry), "machineId": self.machine_id, "delivery": delivery}

    async def _action_daemon_status(self, request: Request) -> object:
        """What `harness daemon status` and `harness doctor` show of a running daemon: its listeners'
        refusal and fault counters, and its relay link (state, last error) with the remote counters."""
        listeners = {"rpc": self.rpc.stats.view()}
        if self.node is not None:
            listeners["gateway"] = self.node.gateway.stats.view()
        return {
            **self.info(),
            "internalErrors": self.internal_errors,
            "listeners": listeners,
            "remote": None if self.node is None else self.node.view(),
        }

    async def _action_agent_remove(self, request: Request) -> object:
        with _agent_errors():
            entry = await self.agents.remove(request.text("agentId"))
        return entry_view(entry)

    async def _subscribe(self, ws: WebSocketConnection, request: Request) -> None:
        self._authorize(request)
        team = self._team(request)
        await ws.send_message(result_frame(request.request_id, team_view(team)))
        revision = team.revision
        while True:
            # Register for the next change before looking: a commit during the send above would otherwise
            # find no event to set, and this watcher would miss it until some later change.
            changed = self._changed.setdefault(team.id, trio.Event())
            team = self._team(request)
            if team.revision == revision:
                await changed.wait()
            else:  # watchers want the latest, not every step between
                revision = team.revision
                await ws.send_message(snapshot_frame(request.request_id, team_view(team)))


@contextlib.contextmanager
def _agent_errors() -> Iterator[None]:
    try:
        yield
    except AgentError as error:
        raise ActionError(error.code.value, error.detail, bound=error.bound) from None


def _answered_at(exchange: Exchange) -> int:
    return exchange.answer.at if exchange.answer is not None else 0


async def serve_until_signalled(daemon: Daemon) -> None:
    """Run `daemon` until SIGTERM or SIGINT, then stop it cleanly."""
    import signal

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for _ in signals:
                    daemon.stop()
                    return

            nursery.start_soon(watch)
            await daemon.run()
            nursery.cancel_scope.cancel()
