# The destination's delivery desk as a reducer: `step(desk, command, limits) -> Accepted[Desk] | Rejected`.
#
# Why a second machine: delivery is an observation of a terminal, not a fact of the question. The owner's
# ledger says what is owed; the desk of the machine that runs the agent decides when a notice may be written
# into that agent's terminal, and remembers that it was, so nothing is ever written twice. The shell polls the
# terminals, asks the desk, and writes only what the desk licensed.
#
# Rules (spec/delivery-v1.md is the authority; DELIVERY_TRANSITIONS and OBSERVATION_REASON are checked equal
# to its tables; the invariants D1-D11 are core/delivery_invariants.py):
# - A notice moves only along DELIVERY_TRANSITIONS. Leaving `queued` for `writing` happens at most once per
#   write id; nothing leads back to `queued` or `writing` from a state that may have written, but the owner's
#   declared loss of an `unconfirmed` write (`Inspect(landed=False)`), once per notice: it permits one more
#   write, under the notice's second write id, and the lost write stays on record. A restart or a write that
#   did not report its end makes `writing` `unconfirmed`, never `queued`.
# - Per agent session, at most one notice is `writing`, and queued notices are written in submission order.
# - A write starts only on the shell's own recheck at the write boundary: `idle`, seen at most
#   `observation_fresh_ms` before the start, no older than the desk's latest observation of that session,
#   after the session's last write settled (`write_settle_ms`) and after the last restart and matching turn.
# - The desk has no effect that sends a key other than the notice's own paste: no interrupt, no cancel, no
#   clearing of a draft. A draft, a dialog, a busy or an offline screen only ever makes a notice wait.
# - Time (`at`, ms), ids, texts and observations arrive in commands; the desk reads no clock.
# - A rejection returns the desk it was given, untouched.
# - Per-step work is bounded by one session's queue (at most `queued_per_agent`) or, for team-wide commands,
#   by the unsent notices of the desk, never by the number of retained records (derived indexes, D11).
from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import attrs
from immutables import Map

from .errors import ErrorCode, Rejected
from .limits import DEFAULT_LIMITS, Limits
from .outcome import Accepted, reject, unchanged
from .records import MembershipState, NoticeKind, QuestionState, Team, TeamState

E = ErrorCode


class DeliveryState(enum.StrEnum):
    QUEUED = "queued"  # owed, not written; waiting for a safe terminal (see its reason)
    HELD = "held"  # owed, not written; its team is paused
    WRITING = "writing"  # the one terminal write has begun
    DELIVERED = "delivered"  # the terminal accepted the paste and the submit
    ACCEPTED = "accepted"  # a matching agent turn was observed (not an answer)
    READ = "read"  # the member retrieved the record through inbox/status
    REJECTED = "rejected"  # the write failed before any byte, or the owner saw it never landed
    UNCONFIRMED = "unconfirmed"  # it might have reached the terminal; never retried unless declared lost
    WITHDRAWN = "withdrawn"  # cancelled or suppressed before any write
    EXPIRED = "expired"  # its time ran out before any write


S = DeliveryState


class Observed(enum.StrEnum):
    """What an engine profile made of a captured screen."""

    IDLE = "idle"
    BUSY = "busy"
    DRAFT = "draft"
    DIALOG = "dialog"
    OFFLINE = "offline"
    SETTLING = "settling"  # idle, but not held still long enough yet (an attach, a draft that just left)
    # A draft that is exactly the text of this desk's own unconfirmed notice of the session: a write cut
    # off between paste and Enter (a killed daemon). Only a person submits or clears it; the desk never does.
    LEFTOVER = "leftover"


class WriteResult(enum.StrEnum):
    OK = "ok"  # pasted and submitted; the prompt took it
    FAILED = "failed"  # failed before any byte reached the terminal
    UNCERTAIN = "uncertain"  # some bytes may have reached it; the submit is not confirmed


class Reason(enum.StrEnum):
    # queued: why the notice waits
    BUSY = "busy"
    OFFLINE = "offline"
    DRAFT = "draft"
    DIALOG = "dialog"
    PRESSURE = "pressure"  # behind another notice of the same session
    UNOBSERVED = "unobserved"  # no fresh, settled idle observation of the session yet
    SETTLING = "settling"  # its terminal looks idle but has not held still long enough yet
    LEFTOVER = "leftover"  # the composer holds an unconfirmed notice's own text: submit it or clear it
    READY = "ready"  # the session is freshly idle: a write is due
    # held
    PAUSED = "paused"
    # rejected / unconfirmed
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    RESTART = "restart"
    TIMEOUT = "timeout"
    INSPECTED = "inspected"
    # read / withdrawn
    INBOX = "inbox"
    RETRIEVED = "retrieved"
    CANCELLED = "cancelled"
    ANSWERED = "answered"
    EXPIRED = "expired"  # the question expired at the owner
    REMOVED = "removed"
    ARCHIVED = "archived"


class DeliveryEvent(enum.StrEnum):
    HOLD = "hold"
    RELEASE = "release"
    START = "start"
    FINISH_OK = "finish_ok"
    FINISH_FAILED = "finish_failed"
    FINISH_UNCERTAIN = "finish_uncertain"
    TURN = "turn"
    READ = "read"
    RETRIEVE = "retrieve"
    WITHDRAW = "withdraw"
    EXPIRE = "expire"
    RESTART = "restart"
    TIMEOUT = "timeout"
    INSPECT_LANDED = "inspect_landed"
    INSPECT_LOST = "inspect_lost"


V = DeliveryEvent

# States in which the notice's one write may have happened (or did): never queued, held or written again.
WRITTEN: frozenset[DeliveryState] = frozenset(
    {S.WRITING, S.DELIVERED, S.ACCEPTED, S.READ, S.REJECTED, S.UNCONFIRMED}
)
UNSENT: frozenset[DeliveryState] = frozenset({S.QUEUED, S.HELD})

_C = E.CONFLICT


def _row(state: S, *targets: S | ErrorCode) -> dict[tuple[S, V], S | ErrorCode]:
    return dict(zip(((state, event) for event in V), targets, strict=True))


# The notice state machine. An ErrorCode rejects the command; a same-state entry is a no-op. Columns are in
# DeliveryEvent order. Nothing leaves a WRITTEN state for QUEUED, HELD or WRITING but the owner's declared
# loss of an unconfirmed write (`_inspect` admits it once per notice): one write per write id, at most two.
_Q, _H, _W, _D, _A, _R, _X, _U, _N, _EX = (
    S.QUEUED, S.HELD, S.WRITING, S.DELIVERED, S.ACCEPTED, S.READ, S.REJECTED, S.UNCONFIRMED, S.WITHDRAWN,
    S.EXPIRED,
)
_P, _K, _T = E.TEAM_PAUSED, E.CANCELLED, E.EXPIRED
# fmt: off
DELIVERY_TRANSITIONS: Mapping[tuple[DeliveryState, DeliveryEvent], DeliveryState | ErrorCode] = {
    #      st   hold rel  strt ok   fail unc  turn read retr wdr  exp  rest tmo  land lost
    **_row(_Q , _H , _Q , _W , _C , _C , _C , _C , _N , _N , _N , _EX, _Q , _Q , _C , _C),
    **_row(_H , _H , _Q , _P , _C , _C , _C , _C , _N , _N , _N , _EX, _H , _H , _C , _C),
    **_row(_W , _W , _W , _C , _D , _X , _U , _A , _W , _W , _W , _W , _U , _U , _C , _C),
    **_row(_D , _D , _D , _C , _D , _C , _C , _A , _R , _R , _D , _D , _D , _D , _D , _C),
    **_row(_A , _A , _A , _C , _A , _A , _A , _A , _R , _R , _A , _A , _A , _A , _A , _C),
    **_row(_R , _R , _R , _C , _R , _R , _R , _R , _R , _R , _R , _R , _R , _R , _R , _R),
    **_row(_X , _X , _X , _C , _C , _X , _C , _A , _R , _R , _X , _X , _X , _X , _D , _X),
    **_row(_U , _U , _U , _C , _D , _X , _U , _A , _R , _R , _U , _U , _U , _U , _D , _Q),
    **_row(_N , _N , _N , _K , _C , _C , _C , _C , _N , _N , _N , _N , _N , _N , _C , _C),
    **_row(_EX, _EX, _EX, _T , _C , _C , _C , _C , _EX, _EX, _EX, _EX, _EX, _EX, _C , _C),
}
# fmt: on

# The reason a notice carries when an event moves it (withdrawals carry the command's reason; a queued
# notice's reason is the session's, see OBSERVATION_REASON).
EVENT_REASON: Mapping[DeliveryEvent, Reason | None] = {
    V.HOLD: Reason.PAUSED,
    V.RELEASE: None,
    V.START: None,
    V.FINISH_OK: None,
    V.FINISH_FAILED: Reason.FAILED,
    V.FINISH_UNCERTAIN: Reason.UNCERTAIN,
    V.TURN: None,
    V.READ: Reason.INBOX,
    V.RETRIEVE: Reason.RETRIEVED,
    V.WITHDRAW: Reason.CANCELLED,
    V.EXPIRE: None,
    V.RESTART: Reason.RESTART,
    V.TIMEOUT: Reason.TIMEOUT,
    V.INSPECT_LANDED: Reason.INSPECTED,
    V.INSPECT_LOST: None,  # queued again: its session's reason
}

# Why the next notice of a session waits, from the desk's latest observation of it. `idle` counts only when
# fresh and settled; otherwise the notice waits as `unobserved`. Only `idle` can ever license a write.
OBSERVATION_REASON: Mapping[Observed, Reason] = {
    Observed.IDLE: Reason.READY,
    Observed.BUSY: Reason.BUSY,
    Observed.DRAFT: Reason.DRAFT,
    Observed.DIALOG: Reason.DIALOG,
    Observed.OFFLINE: Reason.OFFLINE,
    Observed.SETTLING: Reason.SETTLING,
    Observed.LEFTOVER: Reason.LEFTOVER,
}

_FINISH_EVENT: Mapping[WriteResult, DeliveryEvent] = {
    WriteResult.OK: V.FINISH_OK,
    WriteResult.FAILED: V.FINISH_FAILED,
    WriteResult.UNCERTAIN: V.FINISH_UNCERTAIN,
}


# --- records ------------------------------------------------------------------------------------------------


@attrs.frozen
class Notice:
    """One delivery record: a notice owed to one local agent session, and what became of it."""

    id: str
    team_id: str
    kind: NoticeKind
    subject_id: str
    membership_id: str
    agent_id: str
    expires_at: int
    text: str
    seq: int  # submission order on this desk
    submitted_at: int
    state: DeliveryState
    reason: Reason | None
    updated_at: int
    started_at: int | None = None  # when its current write began
    seen_at: int | None = None  # when the shell saw the idle screen that licensed it
    # The owner declared its first write lost (`Inspect(landed=False)` of an unconfirmed write) at `lost_at`;
    # that write began at `lost_started_at`. It may then be written once more, under its second write id.
    lost_at: int | None = None
    lost_started_at: int | None = None


@attrs.frozen
class Session:
    """One local agent session: its queue, its one write in flight, and the desk's latest look at it."""

    agent_id: str
    queue: tuple[str, ...] = ()  # queued notice ids in submission order; the head is written next
    held: tuple[str, ...] = ()  # held notice ids in submission order
    writing: str | None = None
    observed: Observed | None = None
    observed_at: int = 0
    idle_after: int = 0  # an idle counts only if seen at or after this (last write settled, turn, restart)
    timers: tuple[tuple[int, str], ...] = ()  # (due, notice id): expiry of unsent, timeout of writing


@attrs.frozen(cache_hash=True)
class Desk:
    """One destination machine's delivery desk."""

    machine_id: str
    notices: Map[str, Notice] = attrs.field(factory=Map)
    sessions: Map[str, Session] = attrs.field(factory=Map)
    held_teams: frozenset[str] = frozenset()
    next_seq: int = 1
    restarted_at: int = 0


def empty_desk(machine_id: str) -> Desk:
    return Desk(machine_id)


# --- commands -----------------------------------------------------------------------------------------------


@attrs.frozen
class Submit:
    """Owe a notice to a local agent (the owner's SubmitNotice with its rendered text). Idempotent by id."""

    at: int
    team_id: str
    notice_id: str
    kind: NoticeKind
    subject_id: str
    membership_id: str
    machine_id: str
    agent_id: str
    expires_at: int
    text: str


@attrs.frozen
class Observe:
    """An engine profile's reading of the agent's terminal, made at `at`."""

    at: int
    agent_id: str
    observed: Observed


@attrs.frozen
class WriteStarted:
    """The shell rechecked the terminal at the write boundary (`seen` at `seen_at`) and wants to write now.

    The shell pastes only after this is accepted and durable; a rejection means: do not write.
    """

    at: int
    notice_id: str
    seen: Observed
    seen_at: int


@attrs.frozen
class WriteFinished:
    at: int
    notice_id: str
    result: WriteResult


@attrs.frozen
class TurnObserved:
    """A turn of the agent that matches the notice's text was observed (input accepted, not an answer)."""

    at: int
    notice_id: str


@attrs.frozen
class InboxRead:
    """The member read or claimed these items through inbox/status (their notice ids)."""

    at: int
    notice_ids: tuple[str, ...]


@attrs.frozen
class AnswerRetrieved:
    """The asker retrieved the answer (wait/status/inbox): its continuation notice is no longer needed."""

    at: int
    notice_id: str


@attrs.frozen
class Inspect:
    """The owner's resolution of a written notice after inspecting the terminal (never automatic): it landed
    (`delivered`), or, for an `unconfirmed` write, it was lost: queued again for one more write under a new
    write id, once per notice."""

    at: int
    notice_id: str
    landed: bool


@attrs.frozen
class Hold:
    at: int
    team_id: str


@attrs.frozen
class Release:
    at: int
    team_id: str


@attrs.frozen
class Withdraw:
    at: int
    notice_id: str
    reason: Reason = Reason.CANCELLED


@attrs.frozen
class WithdrawMember:
    at: int
    team_id: str
    membership_id: str
    reason: Reason = Reason.REMOVED


@attrs.frozen
class WithdrawTeam:
    at: int
    team_id: str
    reason: Reason = Reason.ARCHIVED


@attrs.frozen
class Restart:
    """The daemon came back at `at`: nothing it saw before is trusted, nothing in flight is retried."""

    at: int


@attrs.frozen
class Tick:
    """The clock passed `at`: expire unsent notices and time out writes that are due."""

    at: int


DeskCommand = (
    Submit
    | Observe
    | WriteStarted
    | WriteFinished
    | TurnObserved
    | InboxRead
    | AnswerRetrieved
    | Inspect
    | Hold
    | Release
    | Withdraw
    | WithdrawMember
    | WithdrawTeam
    | Restart
    | Tick
)


# --- effects ------------------------------------------------------------------------------------------------


@attrs.frozen
class WriteDue:
    """The session looks safe and `notice_id` is next: look once more at the write boundary and report that
    look, as WriteStarted when idle and as Observe otherwise (the notice then waits with its reason)."""

    agent_id: str
    notice_id: str


@attrs.frozen
class WriteNotice:
    """The one write of this notice: paste `text` (bracketed) into the agent's terminal and submit it.

    The only keys the desk ever asks for. Report the end with WriteFinished; never retry it.
    """

    agent_id: str
    notice_id: str
    text: str


@attrs.frozen
class DeliveryChanged:
    """Tell the owner (team RecordDelivery) that a notice's delivery state or reason changed."""

    team_id: str
    notice_id: str
    state: DeliveryState
    reason: Reason | None
    at: int


@attrs.frozen
class ArmDeskTimer:
    """Send Tick(at) to this desk when the clock reaches `at`."""

    at: int


DeskEffect = WriteDue | WriteNotice | DeliveryChanged | ArmDeskTimer
DESK_EFFECTS: tuple[type[DeskEffect], ...] = (WriteDue, WriteNotice, DeliveryChanged, ArmDeskTimer)


# --- helpers ------------------------------------------------------------------------------------------------

EXCERPT_MARK = "\n[... excerpt; full text: {pointer}]"


def excerpt_notice(text: str, pointer: str, limit: int) -> str:
    """`text` if it fits `limit` UTF-8 bytes, else its longest fitting prefix and a pointer to the record.

    The result always fits `limit` bytes and never splits a character.
    """
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    mark = EXCERPT_MARK.format(pointer=pointer).encode("utf-8")
    if len(mark) >= limit:
        return mark[:limit].decode("utf-8", "ignore")
    return data[: limit - len(mark)].decode("utf-8", "ignore") + mark.decode("utf-8")


def write_number(notice: Notice) -> int:
    """Which write of the notice its current (or next) write is: 1, or 2 after a declared loss."""
    return 1 if notice.lost_at is None else 2


def write_id(notice: Notice) -> str:
    """The id of the notice's current (or next) write: a rewrite after a declared loss has a new one."""
    return f"{notice.id}#{write_number(notice)}"


def loss_moot(team: Team, notice: Notice) -> str | None:
    """Why the owner's side refuses to declare a notice's write lost although its desk would take it: the
    notice is no longer owed (its team archived, its member gone, its question no longer open), so one more
    write would be late work; the member reads it with inbox/status. None when it is still owed."""
    member = team.members.get(notice.membership_id)
    exchange = team.exchanges.get(notice.subject_id)
    if team.state is TeamState.ARCHIVED:
        return f"team {team.id!r} is archived"
    if member is None or member.state is not MembershipState.ACTIVE:
        return f"member {notice.membership_id!r} is no longer active"
    if notice.kind is NoticeKind.QUESTION and (exchange is None or exchange.state is not QuestionState.OPEN):
        return f"question {notice.subject_id!r} is no longer open"
    return None


def unsent_count(session: Session) -> int:
    """Queued or in-flight notices of a session: what `queued_per_agent` bounds."""
    return len(session.queue) + len(session.held) + (session.writing is not None)


def fresh_idle(session: Session, now: int, limits: Limits) -> bool:
    """The desk's latest look at the session licenses a write at `now` (rule 3)."""
    return (
        session.observed is Observed.IDLE
        and session.observed_at >= session.idle_after
        and now - session.observed_at <= limits.observation_fresh_ms
    )


def _reason(
    writing: str | None,
    observed: Observed | None,
    observed_at: int,
    idle_after: int,
    *,
    now: int,
    limits: Limits,
) -> Reason:
    if writing is not None:
        return _PRESSURE
    if observed is None:
        return _UNOBSERVED
    if observed is Observed.IDLE and (
        observed_at < idle_after or now - observed_at > limits.observation_fresh_ms
    ):
        return _UNOBSERVED
    return OBSERVATION_REASON[observed]


_READY, _PRESSURE, _UNOBSERVED = Reason.READY, Reason.PRESSURE, Reason.UNOBSERVED  # hot-path constants


# --- the transaction: one step's working copy ---------------------------------------------------------------


class _Work:
    """A session being changed within one step. Its indexes stay tuples (at most `queued_per_agent` long, so
    slicing is cheap) and an untouched session is handed back as the very same object."""

    __slots__ = ("before", "held", "idle_after", "observed", "observed_at", "queue", "timers", "writing")

    def __init__(self, session: Session) -> None:
        self.before = session
        self.queue = session.queue
        self.held = session.held
        self.writing = session.writing
        self.observed = session.observed
        self.observed_at = session.observed_at
        self.idle_after = session.idle_after
        self.timers = session.timers

    def add_timer(self, entry: tuple[int, str]) -> None:
        timers = self.timers
        i = bisect.bisect(timers, entry)
        self.timers = (*timers[:i], entry, *timers[i:])

    def drop_timer(self, entry: tuple[int, str]) -> None:
        timers = self.timers
        i = timers.index(entry)
        self.timers = timers[:i] + timers[i + 1 :]

    def freeze(self) -> Session:
        b = self.before
        if (
            self.queue is b.queue
            and self.held is b.held
            and self.timers is b.timers
            and self.writing == b.writing
            and self.observed is b.observed
            and self.observed_at == b.observed_at
            and self.idle_after == b.idle_after
        ):
            return b
        return Session(
            b.agent_id,
            self.queue,
            self.held,
            self.writing,
            self.observed,
            self.observed_at,
            self.idle_after,
            self.timers,
        )


def _without(ids: tuple[str, ...], notice_id: str) -> tuple[str, ...]:
    i = ids.index(notice_id)
    return ids[:i] + ids[i + 1 :]


class _Txn:
    """One step's working copy of the desk: notices as a persistent map, touched sessions as _Work."""

    __slots__ = ("actions", "at", "changed", "desk", "limits", "notices", "offer", "work")

    def __init__(self, desk: Desk, at: int, limits: Limits) -> None:
        self.desk = desk
        self.at = at
        self.limits = limits
        self.notices = desk.notices
        self.work: dict[str, _Work] = {}
        self.changed: dict[str, None] = {}  # notice ids touched, in order (an ordered set)
        self.actions: list[DeskEffect] = []  # effects other than DeliveryChanged, in order
        self.offer = False  # re-offer a due write even if its reason did not change (a fresh idle look)

    def session(self, agent_id: str) -> _Work:
        work = self.work.get(agent_id)
        if work is None:
            session = self.desk.sessions.get(agent_id)
            work = self.work[agent_id] = _Work(session if session is not None else Session(agent_id))
        return work

    def move(
        self, notice: Notice, event: DeliveryEvent, reason: Reason | None = None, seen_at: int | None = None
    ) -> Notice | Rejected:
        """Move `notice` by `event` along DELIVERY_TRANSITIONS, keeping the session indexes in step."""
        target = DELIVERY_TRANSITIONS[(notice.state, event)]
        if isinstance(target, ErrorCode):
            return reject(target, f"notice {notice.id!r} is {notice.state}; cannot {event}")
        if target is notice.state:
            return notice
        if reason is None:
            reason = EVENT_REASON[event]
        at = self.at
        limits = self.limits
        work = self.session(notice.agent_id)
        old = notice.state
        started_at, seen_at = notice.started_at, notice.seen_at if seen_at is None else seen_at
        lost_at, lost_started_at = notice.lost_at, notice.lost_started_at
        if old is _U and target is _Q:  # the owner's declared loss: the lost write stays on record
            lost_at, lost_started_at, started_at, seen_at = at, started_at, None, None
            work.add_timer((notice.expires_at, notice.id))
        if old is _Q:
            work.queue = _without(work.queue, notice.id)
        elif old is _H:
            work.held = _without(work.held, notice.id)
        elif old is _W:
            assert started_at is not None
            work.writing = None
            work.idle_after = max(work.idle_after, at + limits.write_settle_ms)
            work.drop_timer((started_at + limits.write_timeout_ms, notice.id))
        if old in UNSENT and target not in UNSENT:
            work.drop_timer((notice.expires_at, notice.id))
        if target is _Q:
            reason = _PRESSURE  # the commit gives the head of the queue its session's reason
            work.queue = self._insert(work.queue, notice)
        elif target is _H:
            work.held = self._insert(work.held, notice)
        elif target is _W:
            work.writing = notice.id
            started_at = at
            work.add_timer((at + limits.write_timeout_ms, notice.id))
        moved = Notice(
            notice.id,
            notice.team_id,
            notice.kind,
            notice.subject_id,
            notice.membership_id,
            notice.agent_id,
            notice.expires_at,
            notice.text,
            notice.seq,
            notice.submitted_at,
            target,
            reason,
            at,
            started_at,
            seen_at,
            lost_at,
            lost_started_at,
        )
        self.put(moved)
        return moved

    def _insert(self, ids: tuple[str, ...], notice: Notice) -> tuple[str, ...]:
        """Insert by submission order (a release merges held notices back among queued ones)."""
        notices = self.notices
        i = bisect.bisect([notices[other].seq for other in ids], notice.seq)
        return (*ids[:i], notice.id, *ids[i:])

    def put(self, notice: Notice) -> None:
        self.notices = self.notices.set(notice.id, notice)
        self.changed[notice.id] = None

    def _rereason(self, notice_id: str, reason: Reason) -> Reason | None:
        n = self.notices[notice_id]
        if n.reason is not reason:
            self.put(
                Notice(
                    n.id, n.team_id, n.kind, n.subject_id, n.membership_id, n.agent_id, n.expires_at, n.text,
                    n.seq, n.submitted_at, n.state, reason, self.at, n.started_at, n.seen_at, n.lost_at,
                    n.lost_started_at,
                )
            )
        return n.reason

    def commit(
        self,
        result: object = None,
        *,
        held_teams: frozenset[str] | None = None,
        next_seq: int | None = None,
        restarted_at: int | None = None,
    ) -> Accepted[Desk]:
        """Settle each touched session (head reason, due write, timer) and build the new desk."""
        desk = self.desk
        sessions = desk.sessions
        limits = self.limits
        at = self.at
        actions: list[DeskEffect] = []
        for agent_id, work in self.work.items():
            before = work.before
            if work.queue:
                head_id = work.queue[0]
                reason = _reason(
                    work.writing, work.observed, work.observed_at, work.idle_after, now=at, limits=limits
                )
                previous = self._rereason(head_id, reason)
                if reason is _READY and (self.offer or previous is not _READY):
                    actions.append(WriteDue(agent_id, head_id))
                if before.queue and before.queue[0] != head_id and before.queue[0] in work.queue:
                    self._rereason(before.queue[0], _PRESSURE)  # a release put an older one first
            if work.timers and (not before.timers or before.timers[0][0] != work.timers[0][0]):
                actions.append(ArmDeskTimer(work.timers[0][0]))
            session = work.freeze()
            if session is not before or agent_id not in sessions:
                sessions = sessions.set(agent_id, session)
        if isinstance(result, Notice):
            result = self.notices[result.id]
        old = desk.notices
        effects: list[DeskEffect] = []
        for notice_id in self.changed:
            notice = self.notices[notice_id]
            was = old.get(notice_id)
            if was is None or was.state is not notice.state or was.reason is not notice.reason:
                effects.append(DeliveryChanged(notice.team_id, notice_id, notice.state, notice.reason, at))
        effects.extend(self.actions)
        effects.extend(actions)
        if (
            self.notices is old
            and sessions is desk.sessions
            and (held_teams is None or held_teams == desk.held_teams)
            and restarted_at is None
        ):
            return Accepted(desk, result, (), tuple(effects), changed=False)
        new = Desk(
            desk.machine_id,
            self.notices,
            sessions,
            desk.held_teams if held_teams is None else held_teams,
            desk.next_seq if next_seq is None else next_seq,
            desk.restarted_at if restarted_at is None else restarted_at,
        )
        return Accepted(new, result, (), tuple(effects))


# --- the reducer --------------------------------------------------------------------------------------------


def step(desk: Desk, command: DeskCommand, limits: Limits = DEFAULT_LIMITS) -> Accepted[Desk] | Rejected:
    """Apply one command to the desk. Never raises for any command value."""
    return _HANDLERS[type(command)](desk, command, limits)


def _submit(desk: Desk, command: Submit, limits: Limits) -> Accepted[Desk] | Rejected:
    existing = desk.notices.get(command.notice_id)
    if existing is not None:
        # The id names the notice. A restatement after a restart may render it differently (the roster grew)
        # and is still the notice this desk holds, whatever became of it; a different notice is a conflict.
        same = (
            existing.team_id,
            existing.kind,
            existing.subject_id,
            existing.membership_id,
            existing.agent_id,
        ) == (
            command.team_id,
            command.kind,
            command.subject_id,
            command.membership_id,
            command.agent_id,
        )
        if same and command.machine_id == desk.machine_id:
            return unchanged(desk, existing)
        return reject(E.CONFLICT, f"notice id {command.notice_id!r} was already used for a different notice")
    if command.machine_id != desk.machine_id:
        return reject(E.BAD_REQUEST, f"notice for machine {command.machine_id!r} sent to {desk.machine_id!r}")
    refused = admission_refusal(desk, command.notice_id, command.expires_at, command.at, limits)
    if refused is not None:
        return refused
    if not command.text.strip():
        return reject(E.BAD_REQUEST, "a notice needs a text")
    size = len(command.text.encode("utf-8"))
    if size > limits.notice_bytes:
        return reject(
            E.BOUND_EXCEEDED,
            f"notice has {size} bytes; at most {limits.notice_bytes} (excerpt it with a pointer)",
            "notice_bytes",
        )
    txn = _Txn(desk, command.at, limits)
    work = txn.session(command.agent_id)
    if unsent_count(work.before) >= limits.queued_per_agent:  # nothing of this step has touched it yet
        return reject(
            E.BOUND_EXCEEDED,
            f"agent {command.agent_id!r} already has {limits.queued_per_agent} queued or in-flight notices",
            "queued_per_agent",
        )
    held = command.team_id in desk.held_teams
    notice = Notice(
        command.notice_id,
        command.team_id,
        command.kind,
        command.subject_id,
        command.membership_id,
        command.agent_id,
        command.expires_at,
        command.text,
        desk.next_seq,
        command.at,
        S.HELD if held else S.QUEUED,
        Reason.PAUSED if held else Reason.PRESSURE,
        command.at,
    )
    if held:  # the newest seq: its place is the end
        work.held = (*work.held, notice.id)
    else:
        work.queue = (*work.queue, notice.id)
    work.add_timer((notice.expires_at, notice.id))
    txn.put(notice)
    return txn.commit(notice, next_seq=desk.next_seq + 1)


def admission_refusal(
    desk: Desk, notice_id: str, expires_at: int, at: int, limits: Limits
) -> Rejected | None:
    """Why the desk refuses a new notice whatever its text (a submit checks this before the text): it has
    expired by `at`, or the desk already retains its bound of records. The owner can tell it before it
    renders the notice (a start's restatement, io/delivery_router.py)."""
    if expires_at <= at:
        return reject(E.EXPIRED, f"notice {notice_id!r} expired at {expires_at}")
    if len(desk.notices) >= limits.delivery_records:
        return reject(
            E.BOUND_EXCEEDED,
            f"machine {desk.machine_id!r} already retains {limits.delivery_records} delivery records",
            "delivery_records",
        )
    return None


def _observe(desk: Desk, command: Observe, limits: Limits) -> Accepted[Desk] | Rejected:
    session = desk.sessions.get(command.agent_id)
    if session is None or command.at < desk.restarted_at or command.at < session.observed_at:
        return unchanged(desk, session)  # nobody owed, from before a restart, or superseded: ignored
    txn = _Txn(desk, command.at, limits)
    work = txn.session(command.agent_id)
    work.observed = command.observed
    work.observed_at = command.at
    txn.offer = command.observed is Observed.IDLE
    return txn.commit()


def _stale(desk: Desk, at: int, what: str) -> Rejected | None:
    if at < desk.restarted_at:
        return reject(E.CONFLICT, f"{what} at {at} is from before the restart at {desk.restarted_at}")
    return None


def _notice(desk: Desk, notice_id: str) -> Notice | Rejected:
    notice = desk.notices.get(notice_id)
    if notice is None:
        return reject(E.NOT_FOUND, f"no notice {notice_id!r} on machine {desk.machine_id!r}")
    return notice


def _write_started(desk: Desk, command: WriteStarted, limits: Limits) -> Accepted[Desk] | Rejected:
    notice = _notice(desk, command.notice_id)
    if isinstance(notice, Rejected):
        return notice
    stale = _stale(desk, min(command.at, command.seen_at), "the write boundary check")
    if stale:
        return stale
    target = DELIVERY_TRANSITIONS[(notice.state, V.START)]
    if isinstance(target, ErrorCode):
        return reject(target, f"notice {notice.id!r} is {notice.state}; it is never written (again)")
    session = desk.sessions[notice.agent_id]
    if session.writing is not None:
        return reject(
            E.CONFLICT, f"agent {notice.agent_id!r} is being written {session.writing!r}; one write at a time"
        )
    if session.queue[0] != notice.id:
        return reject(E.CONFLICT, f"notice {session.queue[0]!r} is next for agent {notice.agent_id!r}")
    if command.seen is not Observed.IDLE:
        code = E.OFFLINE if command.seen is Observed.OFFLINE else E.CONFLICT
        return reject(code, f"the terminal was {command.seen} at the write boundary; the notice waits")
    if command.seen_at > command.at:
        return reject(E.BAD_REQUEST, "the boundary check cannot be later than the write start")
    if command.at - command.seen_at > limits.observation_fresh_ms:
        return reject(E.CONFLICT, f"the idle screen is {command.at - command.seen_at} ms old; look again")
    if command.seen_at < session.observed_at:
        return reject(E.CONFLICT, "the idle screen is older than the desk's latest observation; look again")
    if command.seen_at < session.idle_after:
        return reject(
            E.CONFLICT, "the idle screen predates the settling of the last write, turn or restart"
        )
    if command.at >= notice.expires_at:
        return reject(E.EXPIRED, f"notice {notice.id!r} expired at {notice.expires_at}")
    txn = _Txn(desk, command.at, limits)
    work = txn.session(notice.agent_id)
    work.observed = Observed.IDLE
    work.observed_at = command.seen_at
    moved = txn.move(notice, V.START, seen_at=command.seen_at)
    assert isinstance(moved, Notice)
    txn.actions.append(WriteNotice(notice.agent_id, notice.id, notice.text))
    return txn.commit(moved)


def _evidence(
    desk: Desk, at: int, notice_id: str, event: DeliveryEvent, limits: Limits
) -> Accepted[Desk] | Rejected:
    notice = _notice(desk, notice_id)
    if isinstance(notice, Rejected):
        return notice
    stale = _stale(desk, at, f"{event} report")
    if stale:
        return stale
    txn = _Txn(desk, at, limits)
    moved = txn.move(notice, event)
    if isinstance(moved, Rejected):
        return moved
    if event is V.TURN:  # the agent took a turn: any idle seen before it is stale
        work = txn.session(notice.agent_id)
        work.idle_after = max(work.idle_after, at + 1)
    return txn.commit(moved)


def _write_finished(desk: Desk, command: WriteFinished, limits: Limits) -> Accepted[Desk] | Rejected:
    return _evidence(desk, command.at, command.notice_id, _FINISH_EVENT[command.result], limits)


def _turn_observed(desk: Desk, command: TurnObserved, limits: Limits) -> Accepted[Desk] | Rejected:
    return _evidence(desk, command.at, command.notice_id, V.TURN, limits)


def _inspect(desk: Desk, command: Inspect, limits: Limits) -> Accepted[Desk] | Rejected:
    if command.landed:
        return _evidence(desk, command.at, command.notice_id, V.INSPECT_LANDED, limits)
    notice = _notice(desk, command.notice_id)
    if isinstance(notice, Rejected):
        return notice
    stale = _stale(desk, command.at, "a declared loss")
    if stale:
        return stale
    if notice.state is S.UNCONFIRMED:
        refused = _loss_refused(desk, notice, command.at, limits)
        if refused is not None:
            return refused
    txn = _Txn(desk, command.at, limits)
    moved = txn.move(notice, V.INSPECT_LOST)
    if isinstance(moved, Rejected):
        return moved
    if moved.state is S.QUEUED and notice.team_id in desk.held_teams:  # its team is paused: it waits held
        moved = txn.move(moved, V.HOLD)
    return txn.commit(moved)


def _loss_refused(desk: Desk, notice: Notice, at: int, limits: Limits) -> Rejected | None:
    """Why an unconfirmed write may not be declared lost (and the notice written once more), or None."""
    if notice.lost_at is not None:
        return reject(
            E.CONFLICT,
            f"notice {notice.id!r} was declared lost once and written again ({write_id(notice)}); it is "
            "never written a third time: have the member read it with inbox/status",
        )
    if at >= notice.expires_at:
        return reject(E.EXPIRED, f"notice {notice.id!r} expired at {notice.expires_at}; not written again")
    if unsent_count(desk.sessions[notice.agent_id]) >= limits.queued_per_agent:
        return reject(
            E.BOUND_EXCEEDED,
            f"agent {notice.agent_id!r} already has {limits.queued_per_agent} queued or in-flight notices",
            "queued_per_agent",
        )
    return None


# The events `_each` applies to many notices at once: the table admits each from every state, so one notice's
# state never refuses a bulk command for the others.
BULK_EVENTS: Final = (V.READ, V.RETRIEVE, V.WITHDRAW, V.HOLD, V.RELEASE)


def _each(
    desk: Desk,
    at: int,
    ids: Iterable[str],
    event: DeliveryEvent,
    limits: Limits,
    *,
    reason: Reason | None = None,
    held_teams: frozenset[str] | None = None,
) -> Accepted[Desk] | Rejected:
    """Apply `event` to each known notice; unknown ids are ignored (the owner cannot know what arrived)."""
    txn = _Txn(desk, at, limits)
    results: list[Notice] = []
    for notice_id in ids:
        notice = txn.notices.get(notice_id)
        if notice is None:
            continue
        moved = txn.move(notice, event, reason)
        assert isinstance(moved, Notice)  # the table rejects none of these events (BULK_EVENTS)
        results.append(moved)
    return txn.commit(tuple(results), held_teams=held_teams)


def _inbox_read(desk: Desk, command: InboxRead, limits: Limits) -> Accepted[Desk] | Rejected:
    return _each(desk, command.at, command.notice_ids, V.READ, limits)


def _answer_retrieved(desk: Desk, command: AnswerRetrieved, limits: Limits) -> Accepted[Desk] | Rejected:
    return _each(desk, command.at, (command.notice_id,), V.RETRIEVE, limits)


def _all_unsent(session: Session) -> tuple[str, ...]:
    return (*session.queue, *session.held)


def _withdraw(desk: Desk, command: Withdraw, limits: Limits) -> Accepted[Desk] | Rejected:
    return _each(desk, command.at, (command.notice_id,), V.WITHDRAW, limits, reason=command.reason)


def _unsent_where(
    desk: Desk, keep: Callable[[Notice], bool], lists: Callable[[Session], tuple[str, ...]] = _all_unsent
) -> list[str]:
    """Unsent notice ids matching `keep`, in submission order, looked for in the `lists` of every session
    (the queued ones are its `queue`, the held ones its `held`: invariant D11), so that releasing a team that
    holds nothing costs nothing however many notices wait queued."""
    found = [
        notice
        for session in desk.sessions.values()
        for notice_id in lists(session)
        if keep(notice := desk.notices[notice_id])
    ]
    return [notice.id for notice in sorted(found, key=lambda notice: notice.seq)]


def _withdraw_member(desk: Desk, command: WithdrawMember, limits: Limits) -> Accepted[Desk] | Rejected:
    team_id, membership_id = command.team_id, command.membership_id
    ids = _unsent_where(desk, lambda n: n.team_id == team_id and n.membership_id == membership_id)
    return _each(desk, command.at, ids, V.WITHDRAW, limits, reason=command.reason)


def _withdraw_team(desk: Desk, command: WithdrawTeam, limits: Limits) -> Accepted[Desk] | Rejected:
    team_id = command.team_id
    ids = _unsent_where(desk, lambda n: n.team_id == team_id)
    return _each(desk, command.at, ids, V.WITHDRAW, limits, reason=command.reason)


def _hold(desk: Desk, command: Hold, limits: Limits) -> Accepted[Desk] | Rejected:
    team_id = command.team_id
    ids = _unsent_where(desk, lambda n: n.team_id == team_id and n.state is S.QUEUED, lambda s: s.queue)
    return _each(desk, command.at, ids, V.HOLD, limits, held_teams=desk.held_teams | {team_id})


def _release(desk: Desk, command: Release, limits: Limits) -> Accepted[Desk] | Rejected:
    team_id = command.team_id
    ids = _unsent_where(desk, lambda n: n.team_id == team_id and n.state is S.HELD, lambda s: s.held)
    return _each(desk, command.at, ids, V.RELEASE, limits, held_teams=desk.held_teams - {team_id})


def _restart(desk: Desk, command: Restart, limits: Limits) -> Accepted[Desk] | Rejected:
    if command.at < desk.restarted_at:
        return reject(E.BAD_REQUEST, f"restart at {command.at} is before the last one at {desk.restarted_at}")
    txn = _Txn(desk, command.at, limits)
    for agent_id, session in desk.sessions.items():
        work = txn.session(agent_id)
        if session.writing is not None:
            moved = txn.move(desk.notices[session.writing], V.RESTART)
            assert isinstance(moved, Notice)
        work.observed = None  # nothing seen before the restart is trusted after it
        work.observed_at = command.at
        work.idle_after = max(work.idle_after, command.at)
    return txn.commit(None, restarted_at=command.at)


def _tick(desk: Desk, command: Tick, limits: Limits) -> Accepted[Desk] | Rejected:
    txn = _Txn(desk, command.at, limits)
    for session in desk.sessions.values():
        if not session.timers or session.timers[0][0] > command.at:
            continue
        for due, notice_id in session.timers:
            if due > command.at:
                break
            notice = txn.notices[notice_id]
            moved = txn.move(notice, V.TIMEOUT if notice.state is S.WRITING else V.EXPIRE)
            assert isinstance(moved, Notice)
    return txn.commit()


Handler = Callable[[Desk, DeskCommand, Limits], Accepted[Desk] | Rejected]

_HANDLERS: dict[type[DeskCommand], Handler] = {
    Submit: _submit,  # type: ignore[dict-item]
    Observe: _observe,  # type: ignore[dict-item]
    WriteStarted: _write_started,  # type: ignore[dict-item]
    WriteFinished: _write_finished,  # type: ignore[dict-item]
    TurnObserved: _turn_observed,  # type: ignore[dict-item]
    InboxRead: _inbox_read,  # type: ignore[dict-item]
    AnswerRetrieved: _answer_retrieved,  # type: ignore[dict-item]
    Inspect: _inspect,  # type: ignore[dict-item]
    Hold: _hold,  # type: ignore[dict-item]
    Release: _release,  # type: ignore[dict-item]
    Withdraw: _withdraw,  # type: ignore[dict-item]
    WithdrawMember: _withdraw_member,  # type: ignore[dict-item]
    WithdrawTeam: _withdraw_team,  # type: ignore[dict-item]
    Restart: _restart,  # type: ignore[dict-item]
    Tick: _tick,  # type: ignore[dict-item]
}
