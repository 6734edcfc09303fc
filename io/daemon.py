# The machine daemon: the trio shell around the owner's team ledger, composed here of small parts. It owns
# the data directory, serves the `team` RPC on a Unix socket inside it (this user only: the directory is 0700
# and each peer's uid is checked); it and its parts are the only place where time, random ids and durability
# enter.
#
# Parts (each module says why it exists):
# - io/ledger_runner.py: the one writer of the team ledger (persist before act, group commit) and its timers.
# - io/delivery_router.py: the delivery worker; every durable effect to the desk of its destination, here or
#   on a paired machine, and the restatement of what desks must have after a crash or a pairing.
# - io/board_runner.py: the one writer of each team's board (board-v1), whose members follow the team's.
# - io/team_rpc.py: connections and frames; io/team_actions.py, io/team_reads.py, io/board_actions.py and
#   io/agent_actions.py: the action handlers; io/team_access.py: what those share.
# - The remote node (io/remote.py) always runs beside the desk (one local gateway socket and an idle relay
#   loop until a relay is configured), so `harness pair` works against a running daemon. Through it, members
#   on paired machines send their `team` frames here (answered as a local connection would, never with owner
#   authority), and this machine's desk reports notices of teams owned elsewhere back to their owners.
# - Shutdown stops intake first, then lets every queued command become durable before the stores close.
from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import trio

from harness.core.commands import TeamCommand
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted
from harness.core.records import Ledger
from harness.io import home as homes
from harness.io.agent_actions import AgentActions
from harness.io.agents import REGISTRY_FILE, AgentRegistry
from harness.io.board_actions import BoardActions
from harness.io.board_runner import BoardRunner
from harness.io.channels import ChannelKeeper
from harness.io.delivery_router import DeliveryRouter
from harness.io.desk_runner import DeskRunner, RunnerTiming
from harness.io.journal import CheckpointPolicy
from harness.io.ledger_runner import LIMITS_ENV, LedgerRunner, limits_from_env
from harness.io.listeners import Listener, ListenerLimits, local_listener, raise_open_files_limit
from harness.io.local_socket import same_user
from harness.io.redaction_env import from_environment
from harness.io.remote import RemoteNode, TeamAnswer, attach_remote
from harness.io.rpc import HARD_FRAME_BYTES, PROTOCOL, PROTOCOL_REVISION, Request
from harness.io.session_keeper import SessionKeeper
from harness.io.stderr_log import stderr_log
from harness.io.team_access import Handler, TeamAccess
from harness.io.team_actions import TeamActions
from harness.io.team_delivery import DeliveryReport
from harness.io.team_reads import TeamReads
from harness.io.team_rpc import TeamRpc
from harness.io.terminal_port import Terminals
from harness.io.trace import TeamTraces

__all__ = [
    "CHECK_ENV",
    "LIMITS_ENV",
    "Daemon",
    "checking_invariants",
    "limits_from_env",
    "now_ms",
    "serve_until_signalled",
]

# "1": after every step, run the same invariant functions as the stateful tests and the model checker (the
# ledger's in the ledger runner, the desk's in the desk runner) and stop on the first violation. The test
# suite sets it.
CHECK_ENV = "HARNESS_CHECK_INVARIANTS"


def checking_invariants() -> bool:
    return os.environ.get(CHECK_ENV) == "1"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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
        self.router: DeliveryRouter | None = None  # from the ledger to the desks, made in `run`
        self.channels: ChannelKeeper | None = None  # tab channels (spec/channels-v1.md), built in `run`
        self.sessions: SessionKeeper | None = None  # hosted sessions (spec/session-v1.md), built in `run`
        self._log = log or stderr_log("harness daemon")
        self.rpc = Listener(
            "rpc", listener_limits or ListenerLimits(), self._log, peer_ok=lambda s: same_user(s.socket)
        )
        # Built in `run`, once the data directory exists (tests pass faster reconnects).
        self._new_node = remote or (
            lambda home: RemoteNode(home, log=self._log, listener_limits=self.rpc.limits)
        )
        self.node: RemoteNode | None = None
        violated = self._violated if self._check else None
        # Every team's trace (spec/trace-v1.md): the runners emit after each durable step; written aside.
        self.traces = TeamTraces(home, partial(from_environment, home), log=self._log)
        self.ledger = LedgerRunner(
            home,
            limits,
            clock,
            checkpoints=self._checkpoints,
            log=self._log,
            violated=violated,
            trace=self.traces.emit,
        )
        self._access = TeamAccess(self.ledger)
        self.boards = BoardRunner(
            home,
            clock,
            self.ledger.team,
            checkpoints=self._checkpoints,
            log=self._log,
            violated=violated,
            trace=self.traces.emit,
        )
        self._handlers: dict[str, Handler] = {}  # action -> its handler, filled in `run`
        self._front: TeamRpc | None = None  # built in `run`, with the owner token and the machine id
        self._stop_scope: trio.CancelScope | None = None
        self._stop_requested = False

    @property
    def durable(self) -> Ledger:
        """The ledger as readers see it: every command in it is durable, but for reports of this machine's
        desk that ride the next append (`LedgerRunner.report`)."""
        return self.ledger.durable

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
            router = self._assemble()
            await self.ledger.recover()
            await self.boards.recover()
            try:
                async with trio.open_nursery() as tracing:
                    tracing.start_soon(self.traces.run)
                    try:
                        await self._serve(router, task_status)
                    finally:  # what was emitted is still written; then the trace files close
                        self.traces.close()
            finally:
                with trio.CancelScope(shield=True):
                    await self.ledger.aclose()
                    await self.boards.aclose()
                    homes.remove_daemon_info(self.home, os.getpid())
                    with contextlib.suppress(FileNotFoundError):
                        self.socket_path.unlink()  # ours: the lock is still held
        finally:
            os.close(lock_fd)

    def _assemble(self) -> DeliveryRouter:
        """Build the parts that need the data directory: the node, the desk, the router and the RPC front."""
        token = homes.owner_token(self.home)
        self.machine_id = homes.machine_id(self.home)
        self.agents = AgentRegistry.load(self.home)
        if self.agents.unavailable is not None:
            self._log(f"agent registry: {self.agents.unavailable}")
        node = self.node = self._new_node(self.home)
        # Now, not only in attach_remote: the desk reports as it opens, about teams owned here too.
        node.report_local = self.report
        node.report_own = partial(self.ledger.report, rides=True)
        node.owns_team = lambda team_id: team_id in self.ledger.working.teams
        node.limits = self.limits
        desk = self.desk = DeskRunner(
            self.home,
            self.machine_id,
            node.route_report,  # reports about teams owned elsewhere go back to their owner
            None if self._terminals is None else self._terminals(self.agents),
            limits=self.limits,
            clock=self.clock,
            timing=self._runner_timing,
            checkpoint_policy=self._checkpoints,
            log=self._log,
            violated=self._violated if self._check else None,
            trace=self.traces.emit,
            reports_ride=lambda team_id: not node.owned_elsewhere(team_id),
            gate_writes=True,  # until the start's guards are applied (`_serve`)
        )
        router = DeliveryRouter(self.home, self.machine_id, self.ledger, desk, node, log=self._log)
        self.router = router
        node.content_of = router.content_of
        boards = BoardActions(self._access, self.boards)
        self._handlers.update(
            {
                **TeamActions(self._access, router, self.home, boards.follow).handlers(),
                **boards.handlers(),
                **TeamReads(self._access, router).handlers(),
                **AgentActions(
                    self.agents,
                    self.machine_id,
                    self.limits,
                    self.clock,
                    desk,
                    ledger=self.ledger,
                    router=router,
                ).handlers(),
                "daemon_status": self._daemon_status,
            }
        )
        self._front = TeamRpc(
            self.rpc, token, self.machine_id, self._access, self._handlers, fault=self._fault
        )
        # Tab channels apply their plans through the same `team` actions, as the owner (spec/channels-v1.md).
        self.channels = ChannelKeeper(
            self.home,
            self.machine_id,
            self.agents,
            lambda: self.ledger.durable,
            actions=self._handlers,
            limits=self.limits,
            log=self._log,
        )
        # Coordination sessions run here, through the same actions as the owner, and resume after a restart.
        self.sessions = SessionKeeper(self.home, self._handlers, log=self._log, screen=desk.screen)
        return router

    async def _serve(self, router: DeliveryRouter, task_status: trio.TaskStatus[Daemon]) -> None:
        assert self.desk is not None and self.node is not None and self._front is not None
        assert self.channels is not None and self.sessions is not None
        async with trio.open_nursery() as core:
            core.start_soon(self._run_ledger, router)
            await core.start(self.desk.run)
            self.node.on_paired = router.restate
            router.restate_guards()
            await core.start(attach_remote, self, self.node)
            core.start_soon(router.run)
            # A desk whose journal is behind the ledger's (its last steps rode, or an older copy was put back)
            # writes nothing until it has every hold and withdrawal the ledger says it must have.
            await router.guards_applied.wait()
            self.desk.allow_writes()
            with trio.CancelScope() as self._stop_scope:
                if self._stop_requested:
                    self._stop_scope.cancel()
                async with trio.open_nursery() as front:
                    listener = local_listener(self.socket_path)
                    handler = self.rpc.websockets(self._front.connection, HARD_FRAME_BYTES)
                    await front.start(self.rpc.serve, listener, handler)
                    homes.write_private_json(self.home / homes.DAEMON_FILE, self.info())
                    front.start_soon(router.restate_notices_gradually)  # stops with intake, like the timers
                    front.start_soon(self.ledger.run_timers)
                    front.start_soon(self.channels.run)  # stops with intake, like the timers
                    front.start_soon(self.sessions.run)  # a session cut off here resumes at the next start
                    self._log(f"listening on {self.socket_path} (pid {os.getpid()})")
                    task_status.started(self)
            # Intake is closed: the ledger drains its queue, then the delivery worker its own. Peers' requests
            # would only be refused now, and notices still in its outboxes are owed in the durable ledger, so
            # the remote node stops at once.
            await self.ledger.close_intake()
            self.node.stop()
        self._log("stopped; every accepted command is durable")

    async def _run_ledger(self, router: DeliveryRouter) -> None:
        try:
            await self.ledger.run(router)
        finally:  # every accepted command's effects were handed to the router: its worker may finish
            router.close()

    def info(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "socket": str(self.socket_path),
            "startedAt": self._started_at,
            "machineId": self.machine_id,
            "protocol": PROTOCOL,
            "protocolRevision": PROTOCOL_REVISION,
        }

    def _fault(self, why: str) -> None:
        self._faults += 1
        self._log(why)

    def _violated(self, what: str, violation: tuple[str, str]) -> str:
        """A core invariant broken (CHECK_ENV): a bug of harness, counted and logged; the caller stops."""
        why = f"{ErrorCode.CORRUPT_STATE}: invariant {violation[0]} broken by {what}: {violation[1]}"
        self._fault(why)
        return why

    # --- what the remote node and tests call ----------------------------------------------------------------

    async def submit(self, command: TeamCommand) -> Accepted[Ledger] | Rejected:
        """Send a command to the ledger and wait for its durable outcome. Shielded: once sent, it finishes."""
        return await self._access.submit(command)

    async def report(self, report: DeliveryReport) -> None:
        """Record a destination's report (this desk's, or a paired machine's) in the owner ledger."""
        await self.ledger.report(report)

    async def answer_frame(self, message: str, origin: str) -> TeamAnswer:
        """One `team` frame from a member on paired machine `origin`: see `TeamRpc.answer_frame`."""
        assert self._front is not None
        return await self._front.answer_frame(message, origin)

    async def _daemon_status(self, request: Request) -> object:
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
            "traces": self.traces.view(),
            "overLimits": self.ledger.over_limits(),  # teams holding more than a bound lowered since
            # Teams whose owed notices the start has yet to restate (seconds at the seed's bounds).
            "restatingTeams": 0 if self.router is None else self.router.teams_to_restate,
        }


async def serve_until_signalled(daemon: Daemon) -> None:
    """Run `daemon` until SIGTERM or SIGINT, then stop it cleanly (a signal before it listens stops the start
    as cleanly)."""
    import signal

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for _ in signals:
                    daemon.stop()
                    return

            nursery.start_soon(watch)
            with collection_paused() as listening:
                await daemon.run(task_status=listening)
            nursery.cancel_scope.cancel()


class CollectionResumed:
    """The task status `collection_paused` hands the daemon's run: once it listens, what the start built is
    frozen out of the collector's reach and the collector runs again."""

    def __init__(self) -> None:
        self.resumed = False

    def started(self, value: object = None) -> None:
        if not self.resumed:
            self.resumed = True
            gc.freeze()
            gc.enable()


@contextlib.contextmanager
def collection_paused() -> Iterator[CollectionResumed]:
    """The cyclic garbage collector off while the daemon starts, and what the start built frozen out of its
    reach once it listens. A start allocates the recovered ledgers and desk (at the seed's bounds some million
    immutable records, which hold no cycles: reference counting frees them when replaced), and every
    collection meanwhile would walk all of them again: a quarter of the ledger's recovery. Frozen, later
    collections do not walk them either. The price: a cycle of garbage made during the start (a task, an
    exception and its traceback) is never collected, once. The collector runs again whatever ends the start
    (a signal, a failure). The CLI's daemon process only: a test process starts many."""
    gc.disable()
    resumed = CollectionResumed()
    try:
        yield resumed
    finally:
        if not resumed.resumed:
            gc.enable()
