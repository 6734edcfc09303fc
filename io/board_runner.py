# Each team's board, run: the one writer of the journaled board reducer (`harness.core.board.step`), one
# journal store per team beside the team ledgers. A small runner rather than the ledger runner's pipeline:
# board commands come from people and agents at a human pace, so each board steps one command at a time
# under its own lock (journal order is step order) and answers only once the entry is durable.
#
# - The board's session is (team id, the team's `createdAt`): a team recreated under the same id (a new
#   ledger, a restored backup) has a new creation time, so its board starts a new generation and the old
#   board's store is moved aside, never reused; a command naming the old generation is refused by `step`.
# - The board's members follow the team's active memberships: before every board command (and after each
#   create, add and remove) the runner sends `SetMembers` when they differ, so a crash between the ledger's
#   commit and the board's catches up on the next request.
# - A board whose store cannot be read or written is stopped (`corrupt_state`) until the daemon restarts.
# - Each durable command is emitted to the team's trace by kind and ids (`board_event`), never its text.
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

from harness.core.board import (
    BOARD_COMMAND_NAMES,
    DEFAULT_BOARD_LIMITS,
    MEMBERS_OP_PREFIX,
    Board,
    BoardCommand,
    BoardLimits,
    BoardOutcome,
    MemberState,
    Session,
    SetMembers,
    empty_board,
    step,
)
from harness.core.board_invariants import step_violations
from harness.core.board_recovery import Record, Recovered, checkpoint_record, delta_record, recover
from harness.core.errors import ErrorCode, Rejected
from harness.core.outcome import reject, unchanged
from harness.core.records import MembershipState, Team
from harness.io.journal import CheckpointPolicy, JournalStore
from harness.io.journal_files import MAX_CHECKPOINT_BYTES, TEAMS_DIR, Recovery, StoreError
from harness.io.journaled import Reducer, Stepper, Violated
from harness.io.ledger_runner import open_stores, unwritable
from harness.io.trace import TraceEmit, no_trace
from harness.io.trace_files import BOARD

E = ErrorCode
# A broken core invariant (what broke it, the violation) -> the reason the board stops.
# What a request builds once the runner knows the board's session and the time: the command to step.
Build = Callable[[Session, int], BoardCommand]


BOARD_REDUCER: Final = Reducer(step, step_violations)


def boards_dir(data_dir: Path) -> Path:
    """The parent of every team board store under the daemon data directory."""
    return data_dir / TEAMS_DIR / "boards"


def board_store_dir(data_dir: Path, team_id: str) -> Path:
    """Where the board of team `team_id` lives under the daemon data directory."""
    return boards_dir(data_dir) / team_id


def replaced_dir(data_dir: Path, team_id: str, generation: int) -> Path:
    """Where the board of a replaced team generation is kept (outside `boards_dir`, so never replayed)."""
    return data_dir / TEAMS_DIR / "boards-replaced" / f"{team_id}-{generation}"


def session_of(team: Team) -> Session:
    return Session(team.id, team.created_at)


def active_members(team: Team) -> tuple[str, ...]:
    return tuple(
        member_id
        for member_id in team.member_order
        if team.members[member_id].state is MembershipState.ACTIVE
    )


# The fields of a board command that a trace keeps: who did what to which task, role or member. Titles,
# descriptions and note text are left out (a trace says what happened, the board holds the words).
TRACED_FIELDS: dict[str, str] = {
    "op": "op",
    "actor": "memberId",
    "task_id": "taskId",
    "depends_on": "dependsOn",
    "role": "role",
    "member": "member",
    "claimant": "claimant",
    "members": "members",
    "name": "role",  # define_role's role name
}


def board_event(command: BoardCommand) -> dict[str, object]:
    """The trace event of one accepted board command: its kind and ids, never its text."""
    event: dict[str, object] = {
        "type": BOARD_COMMAND_NAMES[type(command)],
        "teamId": command.session.team_id,
        "at": command.at,
    }
    for field, key in TRACED_FIELDS.items():
        value = getattr(command, field, None)
        if value is not None:
            event[key] = list(value) if isinstance(value, tuple) else value
    for field in ("to", "owner"):  # a note's addressee (not its text), a task's owner
        addressee = getattr(command, field, None)
        if addressee is not None:
            event[field] = {"kind": addressee.kind.value, "name": addressee.name}
    return event


def records_of(recovery: Recovery) -> list[Record]:
    """Every record a board store returned, its own compaction checkpoint first."""
    records: list[Record] = []
    if recovery.checkpoint is not None:
        records.append((recovery.checkpoint_seq, recovery.checkpoint))
    records.extend((entry.seq, entry.body) for entry in recovery.entries)
    return records


class BoardRunner:
    """The boards of one data directory: `recover`, then `run` commands until `aclose`."""

    def __init__(
        self,
        home: Path,
        clock: Callable[[], int],
        teams: Callable[[str], Team | None],
        *,
        limits: BoardLimits = DEFAULT_BOARD_LIMITS,
        checkpoints: CheckpointPolicy,
        log: Callable[[str], None],
        violated: Violated | None = None,  # None: invariants are not checked
        trace: TraceEmit = no_trace,
    ) -> None:
        self.home = home
        self._trace = trace
        self._teams = teams  # the durable team by id, read under the board's lock
        self.limits = limits
        self._checkpoints = checkpoints
        self._log = log
        self._steps = Stepper(BOARD_REDUCER, limits, clock, violated)
        self.boards: dict[str, Board] = {}  # durable boards: what readers see
        self.stores: dict[str, JournalStore] = {}
        self.unavailable: dict[str, str] = {}  # team id -> why its board is stopped
        self._locks: dict[str, trio.Lock] = {}
        # Per board: the newest checkpoint record in its journal (seq, board) and the deltas since. When the
        # next one is written the store compacts up to this one, so two checkpoints always remain and a
        # damaged newest one can be scanned back past (seed 002's journal contract).
        self._snapshots: dict[str, tuple[int, Board]] = {}
        self._since: dict[str, int] = {}
        self._heal: set[str] = set()  # journals holding refused records: checkpoint before the next delta

    async def recover(self) -> None:
        opened = await open_stores(
            boards_dir(self.home),
            lambda team_id, found: recover(team_id, records_of(found), self.limits),
            self._stop,
        )
        for team_id, (store, recovered) in opened.items():
            self.stores[team_id] = store
            self._steps.last_at = max(self._steps.last_at, recovered.last_at)
            self._since[team_id] = recovered.applied
            if recovered.checkpoint is not None:
                self._snapshots[team_id] = recovered.checkpoint
            if recovered.board is not None:
                self.boards[team_id] = recovered.board
            self._report(team_id, recovered)

    def _report(self, team_id: str, recovered: Recovered) -> None:
        """Say what recovery left out; refused records make the next command write a checkpoint first, so
        the deltas after it connect to what was recovered rather than to what was refused."""
        for refusal in recovered.refused:
            verb = "ignored" if refusal.ignored else "rejected"
            self._log(f"board of team {team_id}: journal record {refusal.seq} {verb}: {refusal.reason}")
        if recovered.rejected:
            self._heal.add(team_id)
            revision = recovered.board.revision if recovered.board is not None else 0
            self._log(f"board of team {team_id} recovered to revision {revision}")

    async def aclose(self) -> None:
        for store in self.stores.values():
            await store.aclose()
        self.stores.clear()

    def _stop(self, team_id: str, why: str) -> None:
        self.unavailable[team_id] = why
        self._log(f"board of team {team_id} stopped: {why}")

    async def run(self, team: Team, build: Build | None) -> BoardOutcome:
        """Step the command `build` makes on `team`'s board (None: none), after following its members; the
        durable outcome. Shielded: once begun, it finishes, so a lost client never leaves half a step."""
        with trio.CancelScope(shield=True):
            async with self._locks.setdefault(team.id, trio.Lock()):
                # The team as it is now: a request that waited for the lock must not bring back the
                # members of the team it read before (a remove committed meanwhile stays removed).
                outcome = await self._run(self._teams(team.id) or team, build)
        return outcome

    async def _run(self, team: Team, build: Build | None) -> BoardOutcome:
        if team.id in self.unavailable:
            return reject(E.CORRUPT_STATE, self.unavailable[team.id])
        board = await self._board_for(team)
        if isinstance(board, Rejected):
            return board
        members = tuple(
            member_id
            for member_id in board.member_order
            if board.members[member_id].state is MemberState.ACTIVE
        )
        wanted = active_members(team)
        if set(members) != set(wanted):  # set_members is the owner's: the shell acts as the owner here
            op = f"{MEMBERS_OP_PREFIX}{team.revision}"
            follow = SetMembers(op, board.session, None, self._now(), wanted)
            outcome = await self._step(team.id, board, follow)
            if isinstance(outcome, Rejected):
                return outcome
            board = outcome.state
        if build is None:
            return unchanged(board, None)
        return await self._step(team.id, board, build(board.session, self._now()))

    def _now(self) -> int:
        return self._steps.stamp()

    async def _board_for(self, team: Team) -> Board | Rejected:
        """The board of the team's generation; a board of an earlier generation is moved aside first."""
        session = session_of(team)
        board = self.boards.get(team.id)
        store = self.stores.get(team.id)
        if board is not None and board.session != session:
            assert store is not None
            await store.aclose()
            del self.stores[team.id], self.boards[team.id]
            store = None
            aside = replaced_dir(self.home, team.id, board.session.generation)
            try:
                aside.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.replace(board_store_dir(self.home, team.id), aside)
            except OSError as error:
                self._stop(
                    team.id, f"the board of a replaced team {team.id!r} cannot be moved aside: {error}"
                )
                return reject(E.CORRUPT_STATE, self.unavailable[team.id])
            self._log(f"board of team {team.id}: generation {board.session.generation} kept in {aside}")
        if store is None:
            try:
                store, _ = await JournalStore.open(board_store_dir(self.home, team.id))
            except (StoreError, OSError) as error:
                return reject(E.CORRUPT_STATE, f"cannot open the board of team {team.id!r}: {error}")
            self.stores[team.id] = store
        board = board if board is not None else empty_board(session)
        if team.id in self._heal:
            healed = await self._checkpoint(team.id, board)
            if isinstance(healed, Rejected):
                return healed
            self._heal.discard(team.id)
        return board

    async def _step(self, team_id: str, board: Board, command: BoardCommand) -> BoardOutcome:
        outcome, why = self._steps.checked(board, command, f"on the board of {team_id!r}")
        if why is not None:  # never applied: the board stops, as for a store that cannot be written
            self._stop(team_id, why)
            return reject(E.CORRUPT_STATE, why)
        if isinstance(outcome, Rejected) or not outcome.changed:
            return outcome
        store = self.stores[team_id]
        try:
            await store.append(delta_record(command, outcome.state.revision))
        except (StoreError, trio.ClosedResourceError, ValueError, TypeError) as error:
            self._stop(team_id, unwritable(f"the board of team {team_id!r}", error))
            return reject(E.CORRUPT_STATE, self.unavailable[team_id])
        self.boards[team_id] = outcome.state
        self._trace(team_id, BOARD, board_event(command))  # durable now: traced, never waited on
        self._since[team_id] = self._since.get(team_id, 0) + 1
        if self._since[team_id] >= self._checkpoints.every:
            await self._checkpoint(team_id, outcome.state)  # a failure stops the board after this command
        return outcome

    async def _checkpoint(self, team_id: str, board: Board) -> Rejected | None:
        """Append a checkpoint record of `board`, then compact the store up to the previous one."""
        store = self.stores[team_id]
        try:
            seq = await store.append(checkpoint_record(board), max_bytes=MAX_CHECKPOINT_BYTES)
            previous = self._snapshots.get(team_id)
            if previous is not None:
                await store.checkpoint(previous[0], checkpoint_record(previous[1]))
        except (StoreError, trio.ClosedResourceError, ValueError, TypeError) as error:
            self._stop(team_id, f"the board of team {team_id!r} could not be checkpointed: {error}")
            return reject(E.CORRUPT_STATE, self.unavailable[team_id])
        self._snapshots[team_id] = (seq, board)
        self._since[team_id] = 0
        return None
