# The board's invariants (spec/board-v1.md, "Invariants", B1-B15) as production code. The Hypothesis
# machine, the model checker and the daemon (with HARNESS_CHECK_INVARIANTS=1) call these same functions, so
# "the invariant held" means one thing everywhere. The checks restate each rule from the records rather than
# calling the reducer's helpers where they can, so a wrong helper is caught, not echoed.
from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

from .board import (
    DEFAULT_BOARD_LIMITS,
    AddresseeKind,
    AddTask,
    Board,
    BoardCommand,
    BoardLimits,
    CancelTask,
    MemberState,
    Page,
    ReadMessages,
    Release,
    SendNote,
    TaskState,
    step,
    weight,
)
from .errors import ProtocolViolation, Rejected
from .outcome import Accepted
from .values import replace

Violation = tuple[str, str]
TS = TaskState


def board_violations(board: Board, limits: BoardLimits = DEFAULT_BOARD_LIMITS) -> list[Violation]:
    """Every state invariant (B1-B8, B15) that `board` breaks."""
    found: list[Violation] = []
    checks = (_bounds, _dependency_states, _graph, _claims, _roles, _mailboxes, _measure, _orders, _shares)
    for check in checks:
        found.extend(check(board, limits))
    return found


def step_violations(
    before: Board,
    command: BoardCommand,
    outcome: Accepted[Board] | Rejected,
    limits: BoardLimits = DEFAULT_BOARD_LIMITS,
) -> list[Violation]:
    """Invariants about one transition (B10-B14), plus every state invariant of the result."""
    if isinstance(outcome, Rejected):
        return []  # B9 holds by construction: a Rejected carries no board to differ from `before`
    after = outcome.state
    found = board_violations(after, limits)
    if outcome.changed != (after.revision == before.revision + 1) or (
        not outcome.changed and after != before
    ):
        found.append(("B10", f"revision {before.revision} -> {after.revision}, changed={outcome.changed}"))
    found.extend(_claims_kept(before, after, command))
    found.extend(_history_kept(before, after))
    found.extend(_unread_left_only_by_reading(before, after, command, outcome))
    previous = before.operations.get(command.op)
    repeated = type(previous) is type(command) and replace(previous, at=command.at) == command
    if repeated and outcome.changed:
        found.append(("B14", f"a repeat of operation {command.op!r} changed the board"))
    if outcome.changed:
        found.extend(repeat_violations(after, command, outcome, limits))
    return found


def repeat_violations(
    after: Board, command: BoardCommand, outcome: Accepted[Board], limits: BoardLimits = DEFAULT_BOARD_LIMITS
) -> list[Violation]:
    """B14: the accepted `command`, sent again, returns the same record and changes nothing."""
    again = step(after, command, limits)
    if isinstance(again, Rejected) or again.changed or again.result != outcome.result:
        return [("B14", f"repeating operation {command.op!r} gave {again!r}, not {outcome.result!r}")]
    return []


def check_step(
    before: Board,
    command: BoardCommand,
    outcome: Accepted[Board] | Rejected,
    limits: BoardLimits = DEFAULT_BOARD_LIMITS,
) -> None:
    """Raise ProtocolViolation on the first broken invariant: for debug builds and tests."""
    for invariant, detail in step_violations(before, command, outcome, limits):
        raise ProtocolViolation(invariant, detail)


# --- state invariants ---------------------------------------------------------------------------------------


def _bounds(board: Board, limits: BoardLimits) -> Iterable[Violation]:
    counts = {
        "members": len(board.member_order),
        "roles": len(board.role_order),
        "tasks": len(board.task_order),
        "notes": len(board.note_order),
        "operations": len(board.operations),
        "state_bytes": board.bytes,
    }
    for bound, count in counts.items():
        if count > getattr(limits, bound):
            yield "B1", f"{count} {bound}; bound {getattr(limits, bound)}"
    for task in board.tasks.values():
        if (
            len(task.title) > limits.title_chars
            or len(task.description) > limits.description_chars
            or len(task.dependencies) > limits.dependencies
            or len(task.evidence) > limits.evidence_refs
            or any(len(ref) > limits.evidence_ref_chars for ref in task.evidence)
        ):
            yield "B1", f"task {task.id!r} exceeds a bound"
    for note in board.notes.values():
        if len(note.text) > limits.note_chars:
            yield "B1", f"note {note.id!r} has {len(note.text)} characters"
    for role in board.roles.values():
        if len(role.description) > limits.role_description_chars:
            yield "B1", f"role {role.name!r} has a description over its bound"


def _dependency_states(board: Board, limits: BoardLimits) -> Iterable[Violation]:
    """B2. Seed: "Current derived dependency and member states must be consistent at each revision." """
    for task in board.tasks.values():
        states = [board.tasks[dep].state for dep in task.dependencies if dep in board.tasks]
        all_done = all(state is TS.DONE for state in states)
        dead = any(state in (TS.CANCELLED, TS.BLOCKED) for state in states)
        if task.state in (TS.READY, TS.IN_PROGRESS, TS.DONE) and not all_done:
            yield "B2", f"task {task.id!r} is {task.state} with an unfinished dependency"
        elif task.state is TS.PENDING and (all_done or dead):
            yield "B2", f"task {task.id!r} is pending, but its dependencies are all done or one is dead"
        elif task.state is TS.BLOCKED and not dead:
            yield "B2", f"task {task.id!r} is blocked with no cancelled or blocked dependency"
        elif task.state is TS.READY and task.claimant is None and dead:
            yield "B2", f"task {task.id!r} is ready with a dead dependency"


def _graph(board: Board, limits: BoardLimits) -> Iterable[Violation]:
    """B3: dependencies name other, existing tasks once, form no cycle, and the index is their inverse."""
    inverse: dict[str, list[str]] = {}
    for task_id in board.task_order:
        task = board.tasks[task_id]
        if len(set(task.dependencies)) != len(task.dependencies) or task.id in task.dependencies:
            yield "B3", f"task {task.id!r} lists a dependency twice or itself"
        for dep in task.dependencies:
            if dep not in board.tasks:
                yield "B3", f"task {task.id!r} depends on missing {dep!r}"
            inverse.setdefault(dep, []).append(task.id)
    if {dep: sorted(ids) for dep, ids in inverse.items()} != {
        dep: sorted(ids) for dep, ids in board.dependents.items()
    }:
        yield "B3", "the dependents index is not the inverse of the dependencies"
    done: set[str] = set()  # Kahn's algorithm: whatever is left over sits on a cycle
    progress = True
    while progress:
        progress = False
        for task_id, task in board.tasks.items():
            if task_id not in done and all(
                dep in done or dep not in board.tasks for dep in task.dependencies
            ):
                done.add(task_id)
                progress = True
    if len(done) != len(board.tasks):
        yield "B3", f"dependency cycle among {sorted(set(board.tasks.keys()) - done)}"


def _claims(board: Board, limits: BoardLimits) -> Iterable[Violation]:
    """B4: in_progress and done tasks have a claimant, pending, blocked and cancelled ones none; only a done
    task carries evidence."""
    for task in board.tasks.values():
        claimed = task.claimant is not None
        if task.state in (TS.IN_PROGRESS, TS.DONE) and not claimed:
            yield "B4", f"task {task.id!r} is {task.state} without a claimant"
        if task.state in (TS.PENDING, TS.BLOCKED, TS.CANCELLED) and claimed:
            yield "B4", f"task {task.id!r} is {task.state} and claimed by {task.claimant!r}"
        if claimed and task.claimant not in board.members:
            yield "B4", f"task {task.id!r} is claimed by unknown {task.claimant!r}"
        if task.evidence and task.state is not TS.DONE:
            yield "B4", f"task {task.id!r} carries evidence while {task.state}"


def _roles(board: Board, limits: BoardLimits) -> Iterable[Violation]:
    """B5: role holders are distinct active members; every role a task or note names exists."""
    for role in board.roles.values():
        if len(set(role.holders)) != len(role.holders):
            yield "B5", f"role {role.name!r} lists a holder twice"
        for holder in role.holders:
            member = board.members.get(holder)
            if member is None or member.state is not MemberState.ACTIVE:
                yield "B5", f"role {role.name!r} is held by {holder!r}, not an active member"
    named = [task.owner for task in board.tasks.values() if task.owner is not None]
    named += [note.to for note in board.notes.values()]
    for addressee in named:
        known = board.roles if addressee.kind is AddresseeKind.ROLE else board.members
        if addressee.name not in known:
            yield "B5", f"{addressee.kind} {addressee.name!r} is named but does not exist"


def _mailboxes(board: Board, limits: BoardLimits) -> Iterable[Violation]:
    """B6: a note is in exactly its recipients' mailboxes, in sending order; unread is a part of them."""
    position = {note_id: n for n, note_id in enumerate(board.note_order)}
    expected: dict[str, list[str]] = {member_id: [] for member_id in board.members}
    for note_id in board.note_order:
        for recipient in board.notes[note_id].recipients:
            expected.setdefault(recipient, []).append(note_id)
    for member_id, member in board.members.items():
        if list(member.mailbox) != expected.get(member_id, []):
            yield (
                "B6",
                f"member {member_id!r} has mailbox {member.mailbox}, not its notes {expected[member_id]}",
            )
        mailbox = set(member.mailbox)
        order = [position.get(note_id, -1) for note_id in member.unread]
        if not set(member.unread) <= mailbox or order != sorted(set(order)):
            yield "B6", f"member {member_id!r} has unread notes out of its mailbox or order"
    for member_id in set(expected) - set(board.members):
        yield "B6", f"notes reached {member_id!r}, who is not a board member"


def _measure(board: Board, limits: BoardLimits) -> Iterable[Violation]:
    """B7: the state measure is the sum of every record's weight."""
    total = sum(
        weight(record)
        for records in (board.members, board.roles, board.tasks, board.notes, board.operations)
        for record in records.values()
    )
    if total != board.bytes:
        yield "B7", f"the board counts {board.bytes} bytes; its records weigh {total}"


def _shares(board: Board, limits: BoardLimits) -> Iterable[Violation]:
    """B15: each member's share counts its retained operations, the tasks and notes they added, and their
    weight; the owner (no actor) has none."""
    counted: dict[str, tuple[int, int, int, int]] = {}
    for command in board.operations.values():
        if command.actor is None:
            continue
        operations, tasks, notes, total = counted.get(command.actor, (0, 0, 0, 0))
        counted[command.actor] = (
            operations + 1,
            tasks + (1 if type(command) is AddTask else 0),
            notes + (1 if type(command) is SendNote else 0),
            total + weight(command),
        )
    held = {actor: (s.operations, s.tasks, s.notes, s.bytes) for actor, s in board.shares.items()}
    for actor in sorted(held.keys() | counted.keys()):
        share, made = held.get(actor), counted.get(actor)
        if share != made:
            yield "B15", f"{actor!r} holds a share of {share}; its operations make {made}"


def _orders(board: Board, limits: BoardLimits) -> Iterable[Violation]:
    """B8: each order lists its map's keys once, and every record is filed under its own id."""
    filed = (
        (board.member_order, board.members, attrgetter("id")),
        (board.role_order, board.roles, attrgetter("name")),
        (board.task_order, board.tasks, attrgetter("id")),
        (board.note_order, board.notes, attrgetter("id")),
    )
    for order, records, key in filed:
        if len(order) != len(set(order)) or set(order) != set(records.keys()):
            yield "B8", f"order {order} does not list its records once each"
        for record_id, record in records.items():
            if key(record) != record_id:
                yield "B8", f"a record is filed under {record_id!r}"
    for op, command in board.operations.items():
        if command.op != op:
            yield "B8", f"operation {command.op!r} is filed under {op!r}"


# --- step invariants ----------------------------------------------------------------------------------------


def _claims_kept(before: Board, after: Board, command: BoardCommand) -> Iterable[Violation]:
    """B11. Issue: "A claim cannot be stolen: only the claimant, or the owner explicitly, releases it." """
    for task_id, old in before.tasks.items():
        if old.claimant is None or after.tasks.get(task_id) is None:
            continue
        new = after.tasks[task_id]
        if new.claimant == old.claimant:
            continue
        on_task = getattr(command, "task_id", None) == task_id
        released = isinstance(command, Release) and (
            command.actor == old.claimant or (command.actor is None and command.claimant == old.claimant)
        )
        cancelled = isinstance(command, CancelTask) and command.actor in (None, old.claimant)
        if not (on_task and (released or cancelled) and new.claimant is None):
            yield "B11", f"task {task_id!r} claim moved {old.claimant!r} -> {new.claimant!r} by {command!r}"


def _history_kept(before: Board, after: Board) -> Iterable[Violation]:
    """B12: nothing retained disappears; an ended task, a note and a role's description never change."""
    for field in ("members", "roles", "tasks", "notes", "operations"):
        lost = set(getattr(before, field).keys()) - set(getattr(after, field).keys())
        if lost:
            yield "B12", f"{field} {sorted(lost)} vanished"
    for task_id, old in before.tasks.items():
        new = after.tasks.get(task_id)
        if old.state in (TS.DONE, TS.CANCELLED) and new is not None and new != old:
            yield "B12", f"ended task {task_id!r} changed"
    for note_id, note in before.notes.items():
        if after.notes.get(note_id, note) != note:
            yield "B12", f"note {note_id!r} changed"
    for name, role in before.roles.items():
        new_role = after.roles.get(name)
        if new_role is not None and new_role.description != role.description:
            yield "B12", f"role {name!r} changed its description"


def _unread_left_only_by_reading(
    before: Board, after: Board, command: BoardCommand, outcome: Accepted[Board]
) -> Iterable[Violation]:
    """B13: a note leaves a member's unread set only by a read of that member's mailbox that returned it,
    and a new note joins the unread set of each of its recipients. No unread note is skipped."""
    returned: set[str] = set()
    reader = None
    if isinstance(command, ReadMessages) and isinstance(outcome.result, Page):
        reader = command.actor if command.actor is not None else command.member
        returned = {note.id for note in outcome.result.notes}
    for member_id, old in before.members.items():
        new = after.members.get(member_id, old)
        left = set(old.unread) - set(new.unread)
        allowed = returned if member_id == reader else set()
        if not left <= allowed:
            yield "B13", f"notes {sorted(left - allowed)} left {member_id!r}'s unread set unread"
        arrived = [note_id for note_id in new.mailbox if note_id not in set(old.mailbox)]
        if not set(arrived) <= set(new.unread):
            yield "B13", f"new notes {arrived} reached {member_id!r} already read"
