# A team's board as a reducer: `step(board, command, limits) -> Accepted | Rejected`. It is a session-local
# collaboration ledger of roles, dependency-aware tasks and mailbox notes; it spawns nothing and sends
# nothing: notes are pulled by `read_messages`, never pushed into a terminal.
#
# Rules (spec/board-v1.md is the authority; the tables below are checked equal to its tables):
# - Checks run in one fixed order: the session header names this board's team and generation, the actor is
#   allowed (COMMAND_ACTORS), an idempotent repeat returns the existing record (or `conflict`), then the
#   command's own validation and bounds, and last the board-wide bounds (operations, state bytes).
# - A task's explicit state moves only along TASK_TRANSITIONS; pending, blocked and ready are derived from its
#   dependencies (DEPENDENCY_STATE) and recomputed for every dependent whenever a task changes.
# - Every accepted change bumps the revision by exactly one; a no-op or a repeat changes nothing, and a
#   rejection returns nothing but the error, so the board it was given is untouched.
from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from typing import Final

import attrs
from immutables import Map

from .errors import ErrorCode, Rejected
from .limits import DEFAULT_LIMITS
from .outcome import Accepted, reject, unchanged
from .records import ID_PATTERN
from .values import replace

E = ErrorCode

OWNER: Final = "owner"
# The operation ids of the daemon's set_members (`members:TEAM_REVISION`); no other command may use them.
MEMBERS_OP_PREFIX: Final = "members:"
"""How a record names the team's owner (the person) where it names an actor: the owner has no membership."""


@attrs.frozen
class BoardLimits:
    """Every bound of board.v1; exhaustion is `bound_exceeded` naming the field. Ids, names and evidence
    share the team ledger's numbers (core/limits.py) so the same text fits in both."""

    members: int = DEFAULT_LIMITS.memberships  # retained board members, removed ones included
    roles: int = 32
    role_description_chars: int = 2_000
    tasks: int = 500  # retained tasks, done and cancelled ones included
    title_chars: int = 200
    description_chars: int = 8_000
    dependencies: int = 16  # direct dependencies of one task
    notes: int = 2_000  # retained notes per board
    note_chars: int = 8_000
    page_notes: int = 25  # notes one read_messages returns at most (the seed's number)
    evidence_refs: int = DEFAULT_LIMITS.evidence_refs
    evidence_ref_chars: int = DEFAULT_LIMITS.evidence_ref_chars
    id_chars: int = DEFAULT_LIMITS.id_chars  # operation, task, note and member ids, and role names
    operations: int = 10_000  # retained operation ids (reads excepted, see ReadMessages)
    state_bytes: int = 8 * 1024 * 1024  # the seed's eight-MiB state limit, as measured by `weight`
    # One member's share of what the board retains, over the operations it made (`Share`): a member flooding
    # the board fills its own share, never the others' room (the owner has no share).
    member_operations: int = 2_500
    member_tasks: int = 125
    member_notes: int = 500
    member_bytes: int = 1024 * 1024  # the weight of its retained operations (texts included)
    preview_chars: int = 280  # text of one field shown to a model or a panel in a listing


DEFAULT_BOARD_LIMITS = BoardLimits()


# --- records ------------------------------------------------------------------------------------------------


class TaskState(enum.StrEnum):
    PENDING = "pending"  # a dependency is unfinished
    BLOCKED = "blocked"  # a dependency is cancelled or blocked: it can never become ready by itself
    READY = "ready"  # every dependency is done (a claimed ready task has a claimant)
    IN_PROGRESS = "in_progress"
    DONE = "done"
    CANCELLED = "cancelled"


class TaskEvent(enum.StrEnum):
    CLAIM = "claim"
    RELEASE = "release"
    START = "start"
    DONE = "done"
    CANCEL = "cancel"


class MemberState(enum.StrEnum):
    ACTIVE = "active"
    REMOVED = "removed"


class AddresseeKind(enum.StrEnum):
    MEMBER = "member"
    ROLE = "role"


class DependencySummary(enum.StrEnum):
    ALL_DONE = "all_done"
    UNFINISHED = "unfinished"
    DEAD = "dead"  # a dependency is cancelled or blocked


DERIVED: Final = frozenset({TaskState.PENDING, TaskState.BLOCKED, TaskState.READY})
ENDED: Final = frozenset({TaskState.DONE, TaskState.CANCELLED})


@attrs.frozen
class Session:
    """The board's session header: a command for a replaced board generation is refused before it reads."""

    team_id: str
    generation: int


@attrs.frozen
class Addressee:
    """A task's owner or a note's recipient: one member, or a role (whoever holds it)."""

    kind: AddresseeKind
    name: str


@attrs.frozen
class Role:
    name: str
    description: str
    holders: tuple[str, ...]  # active member ids, in the order they took the role; may be empty
    created_at: int


@attrs.frozen(cache_hash=True)
class Task:
    id: str  # the add_task operation id
    title: str
    description: str
    owner: Addressee | None  # who may claim it; None: any member
    creator: str  # a member id, or OWNER
    dependencies: tuple[str, ...]
    state: TaskState
    claimant: str | None  # set while claimed (ready or in_progress), and on done: who completed it
    evidence: tuple[str, ...]
    created_at: int
    updated_at: int


@attrs.frozen(cache_hash=True)
class Note:
    id: str  # the send_note operation id
    sender: str  # a member id, or OWNER
    to: Addressee
    text: str
    at: int
    recipients: tuple[str, ...]  # the members whose mailbox it reached when sent (a role's holders then)


@attrs.frozen
class ReadReceipt:
    """The last read of a member that changed its unread set, so a retry of it returns the same page."""

    op: str
    unread_only: bool
    offset: int
    note_ids: tuple[str, ...]
    next_offset: int | None


@attrs.frozen(cache_hash=True)
class Member:
    id: str
    state: MemberState
    mailbox: tuple[str, ...]  # every note that reached it, oldest first
    unread: tuple[str, ...]  # the notes of its mailbox it has not been shown, oldest first
    last_read: ReadReceipt | None = None


@attrs.frozen
class Page:
    """What read_messages returns: at most `page_notes` notes and where the next page starts (None: end)."""

    notes: tuple[Note, ...]
    next_offset: int | None
    unread: int  # the reader's unread count after this read


@attrs.frozen
class Preview:
    """Text shown to a model or a panel: cut to `preview_chars`, and saying so (never a silent cut)."""

    text: str
    truncated: bool
    chars: int  # the full text's length


# --- commands -----------------------------------------------------------------------------------------------
# Every command carries its operation id, the session header, the actor (a member id the shell resolved from
# the member's key, or None for the owner) and `at` from the shell's clock.


@attrs.frozen
class SetMembers:
    op: str
    session: Session
    actor: str | None
    at: int
    members: tuple[str, ...]  # the team's active membership ids; the others on the board become removed


@attrs.frozen
class DefineRole:
    op: str
    session: Session
    actor: str | None
    at: int
    name: str
    description: str


@attrs.frozen
class TakeRole:
    op: str
    session: Session
    actor: str | None
    at: int
    role: str
    member: str | None = None  # the owner names the member; a member takes a role for itself


@attrs.frozen
class LeaveRole:
    op: str
    session: Session
    actor: str | None
    at: int
    role: str
    member: str | None = None


@attrs.frozen
class AddTask:
    op: str  # becomes the task id
    session: Session
    actor: str | None
    at: int
    title: str
    description: str = ""
    owner: Addressee | None = None
    dependencies: tuple[str, ...] = ()


@attrs.frozen
class AddDependency:
    op: str
    session: Session
    actor: str | None
    at: int
    task_id: str
    depends_on: str


@attrs.frozen
class Claim:
    op: str
    session: Session
    actor: str | None
    at: int
    task_id: str


@attrs.frozen
class Release:
    op: str
    session: Session
    actor: str | None
    at: int
    task_id: str
    claimant: str | None = None  # the owner must name the claim it releases: releasing is explicit


@attrs.frozen
class Start:
    op: str
    session: Session
    actor: str | None
    at: int
    task_id: str


@attrs.frozen
class Complete:
    op: str
    session: Session
    actor: str | None
    at: int
    task_id: str
    evidence: tuple[str, ...] = ()


@attrs.frozen
class CancelTask:
    op: str
    session: Session
    actor: str | None
    at: int
    task_id: str


@attrs.frozen
class SendNote:
    op: str  # becomes the note id
    session: Session
    actor: str | None
    at: int
    to: Addressee
    text: str


@attrs.frozen
class ReadMessages:
    """Reads are too frequent to retain every operation id: only each member's last read that changed its
    unread set is kept (ReadReceipt), which is the one a retry after a lost reply repeats."""

    op: str
    session: Session
    actor: str | None
    at: int
    unread_only: bool = False
    offset: int = 0
    member: str | None = None  # the owner reads for a member by naming it


BoardCommand = (
    SetMembers
    | DefineRole
    | TakeRole
    | LeaveRole
    | AddTask
    | AddDependency
    | Claim
    | Release
    | Start
    | Complete
    | CancelTask
    | SendNote
    | ReadMessages
)

BOARD_COMMAND_NAMES: Mapping[type[BoardCommand], str] = {
    SetMembers: "set_members",
    DefineRole: "define_role",
    TakeRole: "take_role",
    LeaveRole: "leave_role",
    AddTask: "add_task",
    AddDependency: "add_dependency",
    Claim: "claim",
    Release: "release",
    Start: "start",
    Complete: "done",
    CancelTask: "cancel",
    SendNote: "send_note",
    ReadMessages: "read_messages",
}


@attrs.frozen
class Share:
    """What one member's retained operations hold of the board: how many, how many of them added a task or
    sent a note, and their weight. The `member_*` bounds cap it."""

    operations: int = 0
    tasks: int = 0
    notes: int = 0
    bytes: int = 0


NO_SHARE: Final = Share()


@attrs.frozen(cache_hash=True)
class Board:
    session: Session
    revision: int
    members: Map[str, Member]
    member_order: tuple[str, ...]
    roles: Map[str, Role]
    role_order: tuple[str, ...]
    tasks: Map[str, Task]
    task_order: tuple[str, ...]
    notes: Map[str, Note]
    note_order: tuple[str, ...]
    operations: Map[str, BoardCommand]  # accepted operation id -> its command (reads excepted)
    # Derived, so a step at full bounds never scans the board; invariants B3 and B7 recompute them.
    dependents: Map[str, tuple[str, ...]]  # task id -> the tasks that depend on it
    bytes: int  # the sum of `weight` over every record above
    shares: Map[str, Share]  # member id -> its Share (B15); not journaled: rebuilt from `operations`


@attrs.frozen
class BoardChanged:
    """Event: the board reached `revision` (watchers and panels re-read the snapshot)."""

    team_id: str
    revision: int


def empty_board(session: Session) -> Board:
    return Board(session, 0, Map(), (), Map(), (), Map(), (), Map(), (), Map(), Map(), 0, Map())


# --- tables -------------------------------------------------------------------------------------------------

TS = TaskState
TE = TaskEvent

# The explicit task lifecycle. An ErrorCode entry rejects the event; a same-state entry is accepted, and is a
# no-op unless the handler's own rule changes the claim (claiming or releasing a ready task).
TASK_TRANSITIONS: Mapping[tuple[TaskState, TaskEvent], TaskState | ErrorCode] = {
    (TS.PENDING, TE.CLAIM): E.CONFLICT,
    (TS.PENDING, TE.RELEASE): E.CONFLICT,
    (TS.PENDING, TE.START): E.CONFLICT,
    (TS.PENDING, TE.DONE): E.CONFLICT,
    (TS.PENDING, TE.CANCEL): TS.CANCELLED,
    (TS.BLOCKED, TE.CLAIM): E.CONFLICT,
    (TS.BLOCKED, TE.RELEASE): E.CONFLICT,
    (TS.BLOCKED, TE.START): E.CONFLICT,
    (TS.BLOCKED, TE.DONE): E.CONFLICT,
    (TS.BLOCKED, TE.CANCEL): TS.CANCELLED,
    (TS.READY, TE.CLAIM): TS.READY,
    (TS.READY, TE.RELEASE): TS.READY,
    (TS.READY, TE.START): TS.IN_PROGRESS,
    (TS.READY, TE.DONE): E.CONFLICT,
    (TS.READY, TE.CANCEL): TS.CANCELLED,
    (TS.IN_PROGRESS, TE.CLAIM): TS.IN_PROGRESS,
    (TS.IN_PROGRESS, TE.RELEASE): TS.READY,
    (TS.IN_PROGRESS, TE.START): TS.IN_PROGRESS,
    (TS.IN_PROGRESS, TE.DONE): TS.DONE,
    (TS.IN_PROGRESS, TE.CANCEL): TS.CANCELLED,
    (TS.DONE, TE.CLAIM): E.CONFLICT,
    (TS.DONE, TE.RELEASE): E.CONFLICT,
    (TS.DONE, TE.START): E.CONFLICT,
    (TS.DONE, TE.DONE): TS.DONE,
    (TS.DONE, TE.CANCEL): E.CONFLICT,
    (TS.CANCELLED, TE.CLAIM): E.CANCELLED,
    (TS.CANCELLED, TE.RELEASE): E.CANCELLED,
    (TS.CANCELLED, TE.START): E.CANCELLED,
    (TS.CANCELLED, TE.DONE): E.CANCELLED,
    (TS.CANCELLED, TE.CANCEL): TS.CANCELLED,
}

# The state of an unclaimed, unended task, from what its dependencies are.
DEPENDENCY_STATE: Mapping[DependencySummary, TaskState] = {
    DependencySummary.ALL_DONE: TS.READY,
    DependencySummary.UNFINISHED: TS.PENDING,
    DependencySummary.DEAD: TS.BLOCKED,
}

# Who may send each command: the owner (the person), an active member, or either. Finer rules (the claimant,
# a task's creator) are the handlers'.
COMMAND_ACTORS: Mapping[str, str] = {
    "set_members": "owner",
    "define_role": "owner",
    "take_role": "any",
    "leave_role": "any",
    "add_task": "any",
    "add_dependency": "any",
    "claim": "member",
    "release": "any",
    "start": "member",
    "done": "member",
    "cancel": "any",
    "send_note": "any",
    "read_messages": "any",
}

BoardOutcome = Accepted[Board] | Rejected


def step(board: Board, command: BoardCommand, limits: BoardLimits = DEFAULT_BOARD_LIMITS) -> BoardOutcome:
    """Apply one command to the board. Never raises for any command value."""
    if command.session != board.session:
        return reject(
            E.CONFLICT,
            f"the command is for board {command.session.team_id!r} generation {command.session.generation}; "
            f"this is {board.session.team_id!r} generation {board.session.generation} (it was replaced)",
        )
    name = BOARD_COMMAND_NAMES[type(command)]
    allowed = _allowed(board, name, command.actor)
    if allowed is not None:
        return allowed
    if isinstance(command, ReadMessages):
        outcome = _read_messages(board, command, limits)
    else:
        repeat = _repeat(board, command)
        if repeat is not None:
            return repeat
        outcome = _HANDLERS[type(command)](board, command, limits)
    if isinstance(outcome, Rejected):
        return outcome
    return _commit(board, command, outcome, limits)


def _allowed(board: Board, name: str, actor: str | None) -> Rejected | None:
    who = COMMAND_ACTORS[name]
    if actor is None:
        return reject(E.UNAUTHORIZED, f"'{name}' is a member's operation") if who == "member" else None
    if who == "owner":
        return reject(E.UNAUTHORIZED, f"'{name}' is an owner operation")
    member = board.members.get(actor)
    if member is None or member.state is not MemberState.ACTIVE:
        return reject(E.UNAUTHORIZED, f"{actor!r} is not an active member of this board")
    return None


def caller_op_problem(op: str, limits: BoardLimits = DEFAULT_BOARD_LIMITS) -> Rejected | None:
    """Why the shell refuses `op` as the operation id a caller chose, or None. An operation id is an id, and
    the daemon's own (`members:`, its set_members) are no caller's: a member that took `members:N` for its
    notes froze every board request at the next team revision. Checked at admission, not by `step`, so a
    journal written before the rule replays as it was accepted."""
    if op.startswith(MEMBERS_OP_PREFIX):
        return reject(E.BAD_REQUEST, f"operation ids beginning {MEMBERS_OP_PREFIX!r} are the daemon's own")
    return _check_id(op, "the operation id", limits)


def _repeat(board: Board, command: BoardCommand) -> BoardOutcome | None:
    """The existing record when `command` repeats an accepted operation, a conflict, or None to go on."""
    existing = board.operations.get(command.op)
    if existing is None:
        return None
    if type(existing) is not type(command) or replace(existing, at=command.at) != command:
        return reject(E.CONFLICT, f"operation id {command.op!r} was already used for a different command")
    return unchanged(board, _record_of(board, command))


def _record_of(board: Board, command: BoardCommand) -> object:
    if isinstance(command, AddTask):
        return board.tasks[command.op]
    if isinstance(command, SendNote):
        return board.notes[command.op]
    if isinstance(command, (DefineRole, TakeRole, LeaveRole)):
        return board.roles[command.name if isinstance(command, DefineRole) else command.role]
    if isinstance(command, SetMembers):
        return tuple(board.members[member_id] for member_id in board.member_order)
    assert not isinstance(command, ReadMessages)
    return board.tasks[command.task_id]


def _commit(
    board: Board, command: BoardCommand, outcome: Accepted[Board], limits: BoardLimits
) -> BoardOutcome:
    if not outcome.changed:
        return unchanged(board, outcome.result)
    after = outcome.state
    if not isinstance(command, ReadMessages):
        if len(board.operations) >= limits.operations:
            return reject(E.BOUND_EXCEEDED, f"the board retains {limits.operations} operations", "operations")
        after = _put(after, "operations", command.op, command)
    if after.bytes > limits.state_bytes and after.bytes > board.bytes:
        return reject(
            E.BOUND_EXCEEDED,
            f"the board would hold {after.bytes} bytes; at most {limits.state_bytes}",
            "state_bytes",
        )
    if command.actor is not None and not isinstance(command, ReadMessages):
        share = charged(board.shares.get(command.actor, NO_SHARE), command)
        for bound, held in _share_bounds(share):
            if held > getattr(limits, bound):
                most = getattr(limits, bound)
                why = f"member {command.actor!r} holds its share: {bound} {most}"
                return reject(E.BOUND_EXCEEDED, why, bound)
        after = replace(after, shares=after.shares.set(command.actor, share))
    after = replace(after, revision=board.revision + 1)
    return Accepted(after, outcome.result, (BoardChanged(after.session.team_id, after.revision),))


def charged(share: Share, command: BoardCommand) -> Share:
    """`share` with one more retained operation, `command`, of its member."""
    return Share(
        share.operations + 1,
        share.tasks + isinstance(command, AddTask),
        share.notes + isinstance(command, SendNote),
        share.bytes + weight(command),
    )


def shares_of(operations: Mapping[str, BoardCommand]) -> Map[str, Share]:
    """Every member's share of retained `operations`, in their order (a decoded board's `shares`)."""
    shares: dict[str, Share] = {}
    for command in operations.values():
        if command.actor is not None:
            shares[command.actor] = charged(shares.get(command.actor, NO_SHARE), command)
    return Map(shares)


def _share_bounds(share: Share) -> tuple[tuple[str, int], ...]:
    return (
        ("member_operations", share.operations),
        ("member_tasks", share.tasks),
        ("member_notes", share.notes),
        ("member_bytes", share.bytes),
    )


# --- the state measure --------------------------------------------------------------------------------------


def weight(record: object) -> int:
    """A record's share of the state limit: the UTF-8 length of its compact JSON array encoding (attrs
    fields in order, enums as their values). Pure and deterministic, and near what a journal stores."""
    encoded = json.dumps(attrs.astuple(record), ensure_ascii=False, separators=(",", ":"))  # type: ignore[arg-type]
    return len(encoded.encode("utf-8"))


def _put(board: Board, field: str, key: str, record: object) -> Board:
    """Every write of a record goes through here, so `Board.bytes` stays the sum of `weight` (B7)."""
    records: Map[str, object] = getattr(board, field)
    old = records.get(key)
    delta = weight(record) - (0 if old is None else weight(old))
    return replace(board, **{field: records.set(key, record), "bytes": board.bytes + delta})


# --- queries ------------------------------------------------------------------------------------------------


def holds(board: Board, member_id: str, role: str) -> bool:
    found = board.roles.get(role)
    return found is not None and member_id in found.holders


def roles_of(board: Board, member_id: str) -> tuple[str, ...]:
    return tuple(name for name in board.role_order if member_id in board.roles[name].holders)


def unread_count(board: Board, member_id: str) -> int:
    """What `inbox` shows: how many notes the member has not been shown."""
    member = board.members.get(member_id)
    return 0 if member is None else len(member.unread)


def dependency_summary(board: Board, task: Task) -> DependencySummary:
    states = [board.tasks[dep].state for dep in task.dependencies]
    if any(state in (TS.CANCELLED, TS.BLOCKED) for state in states):
        return DependencySummary.DEAD
    if all(state is TS.DONE for state in states):
        return DependencySummary.ALL_DONE
    return DependencySummary.UNFINISHED


def derived_state(board: Board, task: Task) -> TaskState:
    """The state `task` must have: its own when ended or claimed, else what its dependencies make it."""
    if task.state in ENDED or task.state is TS.IN_PROGRESS or task.claimant is not None:
        return task.state
    return DEPENDENCY_STATE[dependency_summary(board, task)]


def page_of(board: Board, member_id: str, unread_only: bool, offset: int, limits: BoardLimits) -> Page:
    """The page read_messages returns, without marking anything read (what the owner's panel shows).
    Seed: "When unreadOnly: true, returned notes leave the unread result set, so nextOffset intentionally
    remains at the current offset until that page is exhausted." So the next offset is this one for an
    unread read, and past the page otherwise; None once no matching note lies beyond the page."""
    member = board.members[member_id]
    source = member.unread if unread_only else member.mailbox
    page = source[offset : offset + limits.page_notes]
    more = offset + len(page) < len(source)
    next_offset = (offset if unread_only else offset + len(page)) if more else None
    shown = set(page)
    unread = sum(1 for note_id in member.unread if note_id not in shown)
    return Page(tuple(board.notes[note_id] for note_id in page), next_offset, unread)


def preview(text: str, limits: BoardLimits = DEFAULT_BOARD_LIMITS) -> Preview:
    cut = text[: limits.preview_chars]
    return Preview(cut, len(cut) < len(text), len(text))


def reaches(board: Board, start: str, target: str) -> bool:
    """Whether `target` is `start` or one of its dependencies, transitively."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        task_id = todo.pop()
        if task_id == target:
            return True
        if task_id not in seen:
            seen.add(task_id)
            todo.extend(board.tasks[task_id].dependencies)
    return False


# --- validation helpers -------------------------------------------------------------------------------------


def _check_id(value: str, what: str, limits: BoardLimits) -> Rejected | None:
    if len(value) > limits.id_chars:
        return reject(E.BOUND_EXCEEDED, f"{what} is longer than {limits.id_chars} characters", "id_chars")
    if not ID_PATTERN.fullmatch(value):
        return reject(E.BAD_REQUEST, f"{what} {value!r} must be letters, digits, '.', '_', ':' or '-'")
    return None


def _check_text(value: str, what: str, limit: int, bound: str, *, required: bool = True) -> Rejected | None:
    if required and not value.strip():
        return reject(E.BAD_REQUEST, f"{what} is empty")
    if len(value) > limit:
        return reject(E.BOUND_EXCEEDED, f"{what} has {len(value)} characters; at most {limit}", bound)
    return None


def _first(*checks: Rejected | None) -> Rejected | None:
    return next((check for check in checks if check is not None), None)


def _active(board: Board, member_id: str) -> bool:
    member = board.members.get(member_id)
    return member is not None and member.state is MemberState.ACTIVE


def _check_addressee(board: Board, addressee: Addressee) -> Rejected | None:
    if addressee.kind is AddresseeKind.MEMBER and not _active(board, addressee.name):
        return reject(E.NOT_FOUND, f"no active member {addressee.name!r} on the board")
    if addressee.kind is AddresseeKind.ROLE and addressee.name not in board.roles:
        return reject(E.NOT_FOUND, f"no role {addressee.name!r} on the board")
    return None


def _subject(board: Board, actor: str | None, member: str | None) -> str | Rejected:
    """The member a role or read command is about: a member acts for itself, the owner names one."""
    if actor is not None:
        if member is not None and member != actor:
            return reject(E.UNAUTHORIZED, "only the owner acts for another member")
        return actor
    if member is None:
        return reject(E.BAD_REQUEST, "the owner must name the member (member)")
    if not _active(board, member):
        return reject(E.NOT_FOUND, f"no active member {member!r} on the board")
    return member


# --- members and roles --------------------------------------------------------------------------------------


def _set_members(board: Board, command: SetMembers, limits: BoardLimits) -> BoardOutcome:
    wanted = set(command.members)
    problem = _first(
        *(_check_id(member_id, "member id", limits) for member_id in command.members),
        None if len(wanted) == len(command.members) else reject(E.BAD_REQUEST, "a member id is listed twice"),
    )
    if problem:
        return problem
    new = [member_id for member_id in command.members if member_id not in board.members]
    if len(board.member_order) + len(new) > limits.members:
        return reject(E.BOUND_EXCEEDED, f"the board retains at most {limits.members} members", "members")
    before = board
    for member_id in board.member_order:
        member = board.members[member_id]
        state = MemberState.ACTIVE if member_id in wanted else MemberState.REMOVED
        if member.state is not state:
            board = _put(board, "members", member_id, replace(member, state=state))
    for member_id in new:
        board = _put(board, "members", member_id, Member(member_id, MemberState.ACTIVE, (), ()))
    board = replace(board, member_order=(*board.member_order, *new))
    for name in board.role_order:  # a removed member holds no role
        role = board.roles[name]
        holders = tuple(holder for holder in role.holders if holder in wanted)
        if holders != role.holders:
            board = _put(board, "roles", name, replace(role, holders=holders))
    if board == before:
        return unchanged(board, tuple(board.members[member_id] for member_id in board.member_order))
    return Accepted(board, tuple(board.members[member_id] for member_id in board.member_order))


def _define_role(board: Board, command: DefineRole, limits: BoardLimits) -> BoardOutcome:
    problem = _first(
        _check_id(command.name, "role name", limits),
        _check_text(
            command.description,
            "role description",
            limits.role_description_chars,
            "role_description_chars",
            required=False,
        ),
    )
    if problem:
        return problem
    if command.name in board.roles:
        return reject(E.CONFLICT, f"role {command.name!r} already exists")
    if len(board.role_order) >= limits.roles:
        return reject(E.BOUND_EXCEEDED, f"the board holds at most {limits.roles} roles", "roles")
    role = Role(command.name, command.description, (), command.at)
    board = replace(_put(board, "roles", role.name, role), role_order=(*board.role_order, role.name))
    return Accepted(board, role)


def _take_or_leave_role(board: Board, command: TakeRole | LeaveRole, limits: BoardLimits) -> BoardOutcome:
    member_id = _subject(board, command.actor, command.member)
    if isinstance(member_id, Rejected):
        return member_id
    role = board.roles.get(command.role)
    if role is None:
        return reject(E.NOT_FOUND, f"no role {command.role!r} on the board")
    taking = isinstance(command, TakeRole)
    if (member_id in role.holders) == taking:
        return unchanged(board, role)
    holders = (
        (*role.holders, member_id)
        if taking
        else tuple(holder for holder in role.holders if holder != member_id)
    )
    role = replace(role, holders=holders)
    return Accepted(_put(board, "roles", role.name, role), role)


# --- tasks --------------------------------------------------------------------------------------------------


def _add_task(board: Board, command: AddTask, limits: BoardLimits) -> BoardOutcome:
    problem = _first(
        _check_id(command.op, "task id", limits),
        _check_text(command.title, "task title", limits.title_chars, "title_chars"),
        _check_text(
            command.description,
            "task description",
            limits.description_chars,
            "description_chars",
            required=False,
        ),
        None if command.owner is None else _check_addressee(board, command.owner),
        None
        if len(command.dependencies) <= limits.dependencies
        else reject(
            E.BOUND_EXCEEDED, f"a task has at most {limits.dependencies} dependencies", "dependencies"
        ),
        None
        if len(set(command.dependencies)) == len(command.dependencies)
        else reject(E.BAD_REQUEST, "a dependency is listed twice"),
        next(
            (
                reject(E.NOT_FOUND, f"no task {dep!r} to depend on")
                for dep in command.dependencies
                if dep not in board.tasks
            ),
            None,
        ),
    )
    if problem:
        return problem
    if len(board.task_order) >= limits.tasks:
        return reject(E.BOUND_EXCEEDED, f"the board retains at most {limits.tasks} tasks", "tasks")
    task = Task(
        id=command.op,
        title=command.title,
        description=command.description,
        owner=command.owner,
        creator=command.actor or OWNER,
        dependencies=command.dependencies,
        state=TS.PENDING,
        claimant=None,
        evidence=(),
        created_at=command.at,
        updated_at=command.at,
    )
    task = replace(task, state=derived_state(board, task))
    board = replace(_put(board, "tasks", task.id, task), task_order=(*board.task_order, task.id))
    for dep in task.dependencies:
        board = replace(
            board, dependents=board.dependents.set(dep, (*board.dependents.get(dep, ()), task.id))
        )
    return Accepted(board, task)


def _add_dependency(board: Board, command: AddDependency, limits: BoardLimits) -> BoardOutcome:
    task = _find_task(board, command.task_id)
    if isinstance(task, Rejected):
        return task
    if command.actor is not None and command.actor != task.creator:
        return reject(E.WRONG_MEMBER, f"only the owner or its creator {task.creator!r} adds dependencies")
    if command.depends_on not in board.tasks:
        return reject(E.NOT_FOUND, f"no task {command.depends_on!r} to depend on")
    if command.depends_on in task.dependencies:
        return unchanged(board, task)
    if task.state not in DERIVED or task.claimant is not None:
        return reject(
            E.CONFLICT, f"task {task.id!r} is {task.state} and claimed or ended; its dependencies are fixed"
        )
    if reaches(board, command.depends_on, task.id):
        return reject(E.BAD_REQUEST, f"{task.id!r} depending on {command.depends_on!r} would close a cycle")
    if len(task.dependencies) >= limits.dependencies:
        return reject(
            E.BOUND_EXCEEDED, f"a task has at most {limits.dependencies} dependencies", "dependencies"
        )
    task = replace(task, dependencies=(*task.dependencies, command.depends_on), updated_at=command.at)
    dependents = board.dependents.set(
        command.depends_on, (*board.dependents.get(command.depends_on, ()), task.id)
    )
    board = _settle(replace(board, dependents=dependents), task, command.at)
    return Accepted(board, board.tasks[task.id])


def _find_task(board: Board, task_id: str) -> Task | Rejected:
    task = board.tasks.get(task_id)
    return reject(E.NOT_FOUND, f"no task {task_id!r} on the board") if task is None else task


def _task_event(
    board: Board, command: Claim | Release | Start | Complete | CancelTask, limits: BoardLimits
) -> BoardOutcome:
    task = _find_task(board, command.task_id)
    if isinstance(task, Rejected):
        return task
    event = _EVENTS[type(command)]
    target = TASK_TRANSITIONS[(task.state, event)]
    if isinstance(target, ErrorCode):
        return reject(target, f"task {task.id!r} is {task.state}; it cannot {event}")
    refused = _RULES[event](board, task, command, limits)
    if refused is not None:
        return refused
    claimant = {
        TE.CLAIM: command.actor,
        TE.RELEASE: None,
        TE.START: task.claimant,
        TE.DONE: task.claimant,
        TE.CANCEL: None,
    }[event]
    evidence = command.evidence if isinstance(command, Complete) else task.evidence
    if (target, claimant, evidence) == (task.state, task.claimant, task.evidence):
        return unchanged(board, task)
    if task.state in ENDED:  # an ended task never changes (B12): a done again must bring the same evidence
        return reject(E.CONFLICT, f"task {task.id!r} is already {task.state} with other evidence")
    moved = replace(task, state=target, claimant=claimant, evidence=evidence, updated_at=command.at)
    board = _settle(board, moved, command.at)
    return Accepted(board, board.tasks[task.id])


def _claim_rule(board: Board, task: Task, command: BoardCommand, limits: BoardLimits) -> Rejected | None:
    actor = command.actor
    assert actor is not None  # COMMAND_ACTORS: claim is a member's operation
    if task.claimant is not None and task.claimant != actor:
        return reject(E.CONFLICT, f"task {task.id!r} is claimed by {task.claimant!r}; a claim is not stolen")
    owner = task.owner
    if owner is not None and not (
        (owner.kind is AddresseeKind.MEMBER and owner.name == actor)
        or (owner.kind is AddresseeKind.ROLE and holds(board, actor, owner.name))
    ):
        return reject(E.WRONG_MEMBER, f"task {task.id!r} is for {owner.kind} {owner.name!r}")
    return None


def _release_rule(board: Board, task: Task, command: BoardCommand, limits: BoardLimits) -> Rejected | None:
    assert isinstance(command, Release)
    if task.claimant is None:
        return reject(E.CONFLICT, f"task {task.id!r} is not claimed")
    if command.actor is None:
        if command.claimant != task.claimant:
            return reject(
                E.CONFLICT,
                f"task {task.id!r} is claimed by {task.claimant!r}; name that claimant to release it",
            )
    elif command.actor != task.claimant:
        return reject(E.WRONG_MEMBER, f"only {task.claimant!r} or the owner releases task {task.id!r}")
    return None


def _claimant_rule(board: Board, task: Task, command: BoardCommand, limits: BoardLimits) -> Rejected | None:
    if task.claimant is None:
        return reject(E.CONFLICT, f"task {task.id!r} is not claimed; claim it first")
    if command.actor != task.claimant:
        return reject(E.WRONG_MEMBER, f"task {task.id!r} is claimed by {task.claimant!r}")
    if isinstance(command, Complete):
        return _first(
            None
            if len(command.evidence) <= limits.evidence_refs
            else reject(
                E.BOUND_EXCEEDED, f"at most {limits.evidence_refs} evidence references", "evidence_refs"
            ),
            next(
                (
                    reject(
                        E.BOUND_EXCEEDED,
                        f"an evidence reference is empty or over {limits.evidence_ref_chars} characters",
                        "evidence_ref_chars",
                    )
                    for ref in command.evidence
                    if len(ref) > limits.evidence_ref_chars or not ref.strip()
                ),
                None,
            ),
        )
    return None


def _cancel_rule(board: Board, task: Task, command: BoardCommand, limits: BoardLimits) -> Rejected | None:
    actor = command.actor
    if actor is None or task.state is TS.CANCELLED:
        return None
    if actor != task.creator:
        return reject(
            E.WRONG_MEMBER, f"only the owner or its creator {task.creator!r} cancels task {task.id!r}"
        )
    if task.claimant is not None and task.claimant != actor:
        return reject(
            E.WRONG_MEMBER, f"task {task.id!r} is claimed by {task.claimant!r}; a claim is not stolen"
        )
    return None


Rule = Callable[[Board, Task, BoardCommand, BoardLimits], Rejected | None]

_RULES: Mapping[TaskEvent, Rule] = {
    TE.CLAIM: _claim_rule,
    TE.RELEASE: _release_rule,
    TE.START: _claimant_rule,
    TE.DONE: _claimant_rule,
    TE.CANCEL: _cancel_rule,
}

_EVENTS: Mapping[type[BoardCommand], TaskEvent] = {
    Claim: TE.CLAIM,
    Release: TE.RELEASE,
    Start: TE.START,
    Complete: TE.DONE,
    CancelTask: TE.CANCEL,
}


def _settle(board: Board, task: Task, at: int) -> Board:
    """Store `task` with its derived state, then recompute its dependents, transitively, from the board as it
    is when each is reached (the graph is acyclic, so this ends)."""
    board = _put(board, "tasks", task.id, replace(task, state=derived_state(board, task)))
    todo = list(board.dependents.get(task.id, ()))
    while todo:
        dependent = board.tasks[todo.pop()]
        state = derived_state(board, dependent)
        if state is not dependent.state:
            board = _put(board, "tasks", dependent.id, replace(dependent, state=state, updated_at=at))
            todo.extend(board.dependents.get(dependent.id, ()))
    return board


# --- notes --------------------------------------------------------------------------------------------------


def _send_note(board: Board, command: SendNote, limits: BoardLimits) -> BoardOutcome:
    problem = _first(
        _check_id(command.op, "note id", limits),
        _check_text(command.text, "note text", limits.note_chars, "note_chars"),
        _check_addressee(board, command.to),
    )
    if problem:
        return problem
    if len(board.note_order) >= limits.notes:
        return reject(E.BOUND_EXCEEDED, f"the board retains at most {limits.notes} notes", "notes")
    sender = command.actor or OWNER
    if command.to.kind is AddresseeKind.MEMBER:
        recipients: tuple[str, ...] = (command.to.name,)
    else:
        recipients = tuple(holder for holder in board.roles[command.to.name].holders if holder != sender)
    note = Note(command.op, sender, command.to, command.text, command.at, recipients)
    board = replace(_put(board, "notes", note.id, note), note_order=(*board.note_order, note.id))
    for member_id in recipients:
        member = board.members[member_id]
        member = replace(member, mailbox=(*member.mailbox, note.id), unread=(*member.unread, note.id))
        board = _put(board, "members", member_id, member)
    return Accepted(board, note)


def _read_messages(board: Board, command: ReadMessages, limits: BoardLimits) -> BoardOutcome:
    member_id = _subject(board, command.actor, command.member)
    if isinstance(member_id, Rejected):
        return member_id
    if command.offset < 0:
        return reject(E.BAD_REQUEST, f"offset must be 0 or more, not {command.offset}")
    member = board.members[member_id]
    receipt = member.last_read
    if receipt is not None and receipt.op == command.op:
        if (receipt.unread_only, receipt.offset) != (command.unread_only, command.offset):
            return reject(E.CONFLICT, f"operation id {command.op!r} was already used for a different read")
        notes = tuple(board.notes[note_id] for note_id in receipt.note_ids)
        return unchanged(board, Page(notes, receipt.next_offset, len(member.unread)))
    page = page_of(board, member_id, command.unread_only, command.offset, limits)
    shown = {note.id for note in page.notes}
    unread = tuple(note_id for note_id in member.unread if note_id not in shown)
    if unread == member.unread:
        return unchanged(board, page)
    receipt = ReadReceipt(
        command.op,
        command.unread_only,
        command.offset,
        tuple(note.id for note in page.notes),
        page.next_offset,
    )
    board = _put(board, "members", member_id, replace(member, unread=unread, last_read=receipt))
    return Accepted(board, page)


Handler = Callable[[Board, BoardCommand, BoardLimits], BoardOutcome]

_HANDLERS: dict[type[BoardCommand], Handler] = {
    SetMembers: _set_members,  # type: ignore[dict-item]
    DefineRole: _define_role,  # type: ignore[dict-item]
    TakeRole: _take_or_leave_role,  # type: ignore[dict-item]
    LeaveRole: _take_or_leave_role,  # type: ignore[dict-item]
    AddTask: _add_task,  # type: ignore[dict-item]
    AddDependency: _add_dependency,  # type: ignore[dict-item]
    Claim: _task_event,  # type: ignore[dict-item]
    Release: _task_event,  # type: ignore[dict-item]
    Start: _task_event,  # type: ignore[dict-item]
    Complete: _task_event,  # type: ignore[dict-item]
    CancelTask: _task_event,  # type: ignore[dict-item]
    SendNote: _send_note,  # type: ignore[dict-item]
}
