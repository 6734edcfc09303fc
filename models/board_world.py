# The team board (core/board.py) as a model-checker world: a small board set up by the reducer under test,
# and the moves of its members, its owner, a note sender and a paging reader, each a real command to that
# reducer. Every state is checked with the board's own invariants and every move with its step invariants
# (core/board_invariants.py, the functions the stateful test and the daemon call), so "the invariant held"
# means one thing everywhere. The board is a separate machine from the team ledger and the delivery desk, so
# it gets its own small world rather than a corner of models/world.py.
from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs

from harness.core import board as b
from harness.core.board_invariants import board_violations, step_violations
from harness.core.errors import Rejected
from harness.core.outcome import Accepted

from .checker import Transition, Violation

SESSION = b.Session("team-b", 1)
# The scenario's clock stands still: the board reads time only to stamp records, and one constant stamp lets
# interleavings that reach the same board meet in one state.
AT = 1_000

# The board's invariants by their spec ids (spec/board-v1.md, section 8): B1-B8 on every state, B9-B14 on
# every step, all through core/board_invariants.py.
BOARD_ALWAYS = tuple(f"B{number}" for number in range(1, 16))
# A reader that follows nextOffset until it is None has been shown every note of its mailbox it had not read
# before it began. Seed: "Follow the returned nextOffset to retrieve later pages."
PAGING = "paging-skips-no-note"

BoardStep = Callable[[b.Board, b.BoardCommand, b.BoardLimits], b.BoardOutcome]


@attrs.frozen
class BoardProtocol:
    """The board reducer under test. Mutants (models/mutants.py) swap in deliberately broken variants."""

    name: str = "board.v1"
    step: BoardStep = b.step
    description: str = ""


BOARD_REAL = BoardProtocol()


@attrs.frozen
class PlannedTask:
    """A task the owner adds before the scenario starts."""

    id: str
    dependencies: tuple[str, ...] = ()
    owner: b.Addressee | None = None


@attrs.frozen
class BoardConfig:
    """A board scenario: who is on the board, what it holds at the start, and who may do what on it."""

    members: tuple[str, ...]
    roles: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (role name, its holders)
    tasks: tuple[PlannedTask, ...] = ()
    workers: tuple[str, ...] = ()  # members who claim, start, complete and release any task, in any order
    owner_releases: bool = False  # the owner releases a task's claim naming a worker (the right one or not)
    owner_cancels: bool = False
    attempts: int = 1  # accepted changes one actor makes with one verb on one task
    sender: str | None = None  # sends `notes` notes to `reader`, one at a time
    reader: str | None = None  # pages its mailbox, following nextOffset, `reads` reads in all
    notes: int = 0
    reads: int = 0
    limits: b.BoardLimits = b.DEFAULT_BOARD_LIMITS


@attrs.frozen
class Paging:
    """A reader's pass through its mailbox: the filter, the offset it follows, and what it was shown."""

    unread_only: bool
    offset: int
    shown: frozenset[str]
    read_before: frozenset[str]  # the notes of its mailbox it had read when the pass began


@attrs.frozen
class BoardWorld:
    board: b.Board
    reads: int = 0
    paging: Paging | None = None


def initial_board_world(config: BoardConfig, protocol: BoardProtocol) -> BoardWorld:
    """The owner sets the board up through the reducer under test: members, roles and their holders, tasks."""
    setup: list[b.BoardCommand] = [b.SetMembers("setup.members", SESSION, None, AT, config.members)]
    for name, holders in config.roles:
        setup.append(b.DefineRole(f"setup.role.{name}", SESSION, None, AT, name, f"the {name} role"))
        setup.extend(b.TakeRole(f"setup.{name}.{m}", SESSION, None, AT, name, m) for m in holders)
    for task in config.tasks:
        title = f"do {task.id}"
        setup.append(b.AddTask(task.id, SESSION, None, AT, title, "", task.owner, task.dependencies))
    board = b.empty_board(SESSION)
    for command in setup:
        outcome = protocol.step(board, command, config.limits)
        if isinstance(outcome, Rejected):
            raise ValueError(f"the scenario's setup was refused: {command!r}: {outcome.detail}")
        board = outcome.state
    return BoardWorld(board)


# Boards a step's invariants found clean: `step_violations` checks every state invariant of the board a step
# made (B1-B8) besides the step's own, so the search's check of the world that step led to would only repeat
# it (half of a board scenario's time went to the invariants, most of it to measuring records for B7). By
# identity, each board kept alive with the limits it was checked under; bounded, it starts again when full.
_CLEAN: dict[int, tuple[b.Board, b.BoardLimits]] = {}
_CLEAN_LIMIT = 1 << 16


def board_always(board: b.Board, limits: b.BoardLimits) -> list[Violation]:
    """`board_violations(board, limits)`, unless a step just found this very board clean."""
    clean = _CLEAN.get(id(board))
    if clean is not None and clean[0] is board and clean[1] == limits:
        return []
    return board_violations(board, limits)


def _found_clean(board: b.Board, limits: b.BoardLimits) -> None:
    if len(_CLEAN) >= _CLEAN_LIMIT:
        _CLEAN.clear()
    _CLEAN[id(board)] = (board, limits)


def board_successors(
    world: BoardWorld, config: BoardConfig, protocol: BoardProtocol
) -> Iterator[Transition[BoardWorld]]:
    """Every move that changes the world, and every move (refused or not) that breaks a step invariant."""
    for label, command in _moves(world, config):
        before = world.board
        outcome = protocol.step(before, command, config.limits)
        violations = step_violations(before, command, outcome, config.limits)
        if not violations and isinstance(outcome, Accepted):
            _found_clean(outcome.state, config.limits)
        after = world if isinstance(outcome, Rejected) else attrs.evolve(world, board=outcome.state)
        if isinstance(command, b.ReadMessages) and isinstance(outcome, Accepted):
            after, missed = _followed(after, world, command, outcome.result, config)
            violations.extend(missed)
        if after != world or violations:
            yield Transition(label, after, tuple(violations))


def _moves(world: BoardWorld, config: BoardConfig) -> Iterator[tuple[str, b.BoardCommand]]:
    board = world.board
    for worker in config.workers:
        for task_id in board.task_order:
            for verb, kind in _WORKER_VERBS.items():
                op = _op(board, config, f"{worker}.{verb}.{task_id}")
                if op is None:
                    continue
                command = (
                    b.Complete(op, SESSION, worker, AT, task_id, (f"{task_id}.log",))
                    if kind is b.Complete
                    else kind(op, SESSION, worker, AT, task_id)
                )
                yield f"{worker} {verb}s {task_id}", command
    for task_id in board.task_order:
        for worker in config.workers if config.owner_releases else ():
            op = _op(board, config, f"owner.release.{task_id}.{worker}")
            if op is not None:
                label = f"owner releases {task_id} naming {worker}"
                yield label, b.Release(op, SESSION, None, AT, task_id, worker)
        op = _op(board, config, f"owner.cancel.{task_id}") if config.owner_cancels else None
        if op is not None:
            yield f"owner cancels {task_id}", b.CancelTask(op, SESSION, None, AT, task_id)
    if config.sender is not None and config.reader is not None and len(board.note_order) < config.notes:
        note_id = f"note{len(board.note_order) + 1}"
        to = b.Addressee(b.AddresseeKind.MEMBER, config.reader)
        yield f"{config.sender} sends {note_id}", b.SendNote(note_id, SESSION, config.sender, AT, to, note_id)
    if config.reader is not None and world.reads < config.reads:
        op = f"{config.reader}.read.{world.reads}"
        paging = world.paging
        passes = [(True, 0), (False, 0)] if paging is None else [(paging.unread_only, paging.offset)]
        for unread_only, offset in passes:
            label = f"{config.reader} reads {'unread' if unread_only else 'all'} from {offset}"
            yield label, b.ReadMessages(op, SESSION, config.reader, AT, unread_only, offset)


_WORKER_VERBS: dict[str, type[b.Claim | b.Start | b.Complete | b.Release]] = {
    "claim": b.Claim,
    "start": b.Start,
    "complete": b.Complete,
    "release": b.Release,
}


def _op(board: b.Board, config: BoardConfig, prefix: str) -> str | None:
    """The operation id of an actor's next try at one move, or None once its accepted tries are used up. A
    refused try keeps its id, so trying again is a retry; the ids are the same on every interleaving."""
    done = sum(1 for op in board.operations if op.startswith(f"{prefix}."))
    return f"{prefix}.{done}" if done < config.attempts else None


def _followed(
    after: BoardWorld, before: BoardWorld, read: b.ReadMessages, page: object, config: BoardConfig
) -> tuple[BoardWorld, list[Violation]]:
    """The reader takes in one page: it follows nextOffset, and at the end of a pass checks what it saw."""
    assert isinstance(page, b.Page) and config.reader is not None
    member = before.board.members[config.reader]
    paging = before.paging or Paging(
        read.unread_only, 0, frozenset(), frozenset(member.mailbox) - frozenset(member.unread)
    )
    shown = paging.shown | {note.id for note in page.notes}
    reads = before.reads + 1
    if page.next_offset is not None:
        following = attrs.evolve(paging, offset=page.next_offset, shown=shown)
        return attrs.evolve(after, reads=reads, paging=following), []
    missed = sorted(set(after.board.members[config.reader].mailbox) - shown - paging.read_before)
    found: list[Violation] = []
    if missed:
        filtered = "unread" if paging.unread_only else "all"
        found.append((PAGING, f"{config.reader}'s pass over {filtered} notes ended without showing {missed}"))
    return attrs.evolve(after, reads=reads, paging=None), found


def describe_board_world(world: BoardWorld) -> dict[str, str]:
    """Flat facts for trace diffs: tasks and their claims, mailboxes, the reader's pass."""
    board = world.board
    facts = {"revision": str(board.revision), "reads": str(world.reads)}
    for task_id in board.task_order:
        task = board.tasks[task_id]
        facts[f"task {task_id}"] = str(task.state) + (f" by {task.claimant}" if task.claimant else "")
    for member_id in board.member_order:
        member = board.members[member_id]
        if member.mailbox:
            facts[f"{member_id} mailbox"] = ", ".join(member.mailbox)
            facts[f"{member_id} unread"] = ", ".join(member.unread) or "-"
    paging = world.paging
    if paging is not None:
        filtered = "unread" if paging.unread_only else "all"
        facts["pass"] = f"{filtered} at {paging.offset}, shown {', '.join(sorted(paging.shown)) or '-'}"
    return facts
