# A coordination session (seed 004: supervise, facilitate, discuss, judge) as a reducer:
# `step(session, command, limits) -> Accepted | Rejected`. A lead and named participants, each an agent of one
# team, coordinate with Ask / Answer / Announce / RollCall and end with Conclude, Recess or Adjourn. The team
# ledger stays the transport and the authority on questions: the session gates the tools by role, tracks the
# asks it opened, and tells the daemon what to do (open an ask, remind, release, cancel, trace) as effects.
#
# Rules (spec/session-v1.md is the authority; the tables below are checked equal to its tables):
# - Checks run in one fixed order: the session exists, the actor is a member and its role holds the tool
#   (ROLE_TOOLS), an idempotent repeat returns the first result (or `conflict`), the session state admits the
#   command (SESSION_GATE), then the command's own validation and bounds.
# - team.v1 over the seed: Answer names its question (a reply without an id is refused, listing the caller's
#   owed question ids), and nothing is broadcast that no one called Announce for.
# - An owed ask moves only along ASK_TRANSITIONS: one reminder, then a protocol violation that releases the
#   asker (the ledger ends it `expired`, reason `no_answer`); an ending session cancels every ask in flight.
from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Final

import attrs
from immutables import Map

from .errors import ErrorCode, Rejected
from .limits import DEFAULT_LIMITS, HOUR_MS, MINUTE_MS
from .outcome import Accepted, reject, unchanged
from .records import ID_PATTERN
from .values import replace

E = ErrorCode

NO_ANSWER: Final = "no_answer"
"""The reason a released ask ends with in the ledger: expired, never an invented answer."""


@attrs.frozen
class SessionLimits:
    """Every bound of session.v1. A refused call is `bound_exceeded` naming the field; a bound the session
    reaches by itself (turns, reminders, length) stops it, with the bound as its reason."""

    participants: int = DEFAULT_LIMITS.memberships - 1  # the lead is the team's other member
    lead_turns: int = 200
    reminders: int = 64
    announcements: int = 16
    announcement_chars: int = 2_000
    asks: int = DEFAULT_LIMITS.exchanges  # asks a session opens, each one a ledger exchange
    rfcs: int = 32
    thread_posts: int = 500
    text_chars: int = 8_000  # a conclusion, a request for comment, an acknowledgement
    id_chars: int = DEFAULT_LIMITS.id_chars
    session_ms: int = 4 * HOUR_MS
    reminder_after_ms: int = 5 * MINUTE_MS  # an ask owed this long gets its one reminder
    violation_after_ms: int = 5 * MINUTE_MS  # an ask still owed this long after its reminder is a violation


DEFAULT_SESSION_LIMITS = SessionLimits()


# --- records ------------------------------------------------------------------------------------------------


class Mode(enum.StrEnum):
    SUPERVISE = "supervise"
    FACILITATE = "facilitate"
    DISCUSS = "discuss"
    JUDGE = "judge"
    RUN = "run"


class Role(enum.StrEnum):
    FACILITATOR = "facilitator"
    FACILITATED_AGENT = "facilitated_agent"
    SUPERVISOR = "supervisor"
    SUPERVISED_AGENT = "supervised_agent"
    DISCUSS_LEAD = "discuss_lead"
    DISCUSS_AGENT = "discuss_agent"
    JUDGE = "judge"
    RUNNER = "runner"


class Tool(enum.StrEnum):
    ASK = "ask"
    ANSWER = "answer"
    ANNOUNCE = "announce"
    ROLL_CALL = "roll_call"
    CONCLUDE = "conclude"
    REQUEST_FOR_COMMENT = "request_for_comment"
    RECESS = "recess"
    ADJOURN = "adjourn"
    ACKNOWLEDGE = "acknowledge"


class Participants(enum.StrEnum):
    """How many participants a mode takes besides its lead."""

    NONE = "none"
    ONE = "one"
    MANY = "many"  # one up to the `participants` bound


class SessionState(enum.StrEnum):
    RUNNING = "running"
    ENDED = "ended"


class Termination(enum.StrEnum):
    CONCLUDED = "concluded"  # an explicit Conclude, Recess or Adjourn
    STOPPED = "stopped"  # a lead error, an agent crash, an abort, or a bound the session reached


class AskState(enum.StrEnum):
    IN_FLIGHT = "in_flight"
    ANSWERED = "answered"
    RELEASED = "released"  # a protocol violation: the asker was released, the ledger ends it no_answer
    CANCELLED = "cancelled"  # the session ended with it in flight
    ENDED = "ended"  # the ledger ended it otherwise (its deadline, a cancel, or it refused to open it)


class AskEvent(enum.StrEnum):
    ANSWERED = "answered"
    ENDED = "ended"
    REMIND = "remind"
    RELEASE = "release"
    CANCEL = "cancel"


class TraceKind(enum.StrEnum):
    SESSION_START = "session_start"
    AGENT_START = "agent_start"
    PROTOCOL_VIOLATION = "protocol_violation"
    LEAD_TURN_LIMIT = "lead_turn_limit"
    SUMMARY = "summary"


class PostKind(enum.StrEnum):
    ANSWER = "answer"  # discuss mode: an answer to the lead, streamed to the thread as it arrives
    ACKNOWLEDGE = "acknowledge"


@attrs.frozen
class Member:
    name: str  # the team member's name; the daemon maps it to the membership
    role: Role
    last_activity_at: int


@attrs.frozen(cache_hash=True)
class AskRecord:
    id: str  # the ledger question id
    op: str  # the Ask's operation id
    asker: str
    to: str
    created_at: int
    state: AskState
    reminded_at: int | None = None
    ended_at: int | None = None
    reason: str | None = None  # why it ended, when it did not end answered


@attrs.frozen
class Announcement:
    id: str  # the Announce operation id
    author: str
    at: int
    text: str
    recipients: tuple[str, ...]


@attrs.frozen
class RequestRecord:
    """An intent to open a new discussion thread later (the seed's ctx.rfcs): recorded, never delivered."""

    id: str
    author: str
    at: int
    text: str


@attrs.frozen
class ThreadPost:
    id: str  # the Acknowledge operation id, or the answered question id
    kind: PostKind
    author: str
    at: int
    text: str  # empty for an answer: its text is the ledger's


@attrs.frozen
class RollCallEntry:
    """One member as RollCall shows it; the daemon adds the desk's observation (idle, busy, draft, dialog,
    offline), which is not the session's to know."""

    name: str
    role: Role
    owed: tuple[str, ...]
    last_activity_at: int


# --- commands -----------------------------------------------------------------------------------------------
# Time (`at`, milliseconds) and operation ids arrive in commands. Tool calls carry `actor`, the member name
# the daemon resolved from the caller's member key; observations come from the daemon itself.


@attrs.frozen
class Start:
    at: int
    session_id: str
    mode: Mode
    lead: str
    participants: tuple[str, ...]


@attrs.frozen
class Ask:
    at: int
    actor: str
    op: str  # the question id (one target), or the prefix of `op:name` ids (a lead asking every participant)
    text: str
    to: str | None = None


@attrs.frozen
class Answer:
    at: int
    actor: str
    question_id: str | None


@attrs.frozen
class Announce:
    at: int
    actor: str
    op: str
    text: str


@attrs.frozen
class RollCall:
    at: int
    actor: str


@attrs.frozen
class Conclude:
    at: int
    actor: str
    summary: str = ""


@attrs.frozen
class Recess:
    at: int
    actor: str
    summary: str = ""


@attrs.frozen
class Adjourn:
    at: int
    actor: str
    summary: str = ""


@attrs.frozen
class RequestForComment:
    at: int
    actor: str
    op: str
    text: str


@attrs.frozen
class Acknowledge:
    at: int
    actor: str
    op: str
    text: str


@attrs.frozen
class Tick:
    """The clock passed `at`: remind, release, or stop at the session's length. Armed from next_deadline."""

    at: int


@attrs.frozen
class TurnStarted:
    """The desk saw `member` start a turn (accepted input); the lead's turns are counted and bounded."""

    at: int
    member: str


@attrs.frozen
class AskAnswered:
    """The ledger recorded an on-time answer to `question_id`."""

    at: int
    question_id: str


@attrs.frozen
class AskEnded:
    """The ledger ended `question_id` without an answer (deadline, cancel), or refused to open it."""

    at: int
    question_id: str
    reason: str


@attrs.frozen
class AgentCrashed:
    at: int
    member: str
    detail: str


@attrs.frozen
class LeadError:
    at: int
    detail: str


@attrs.frozen
class Abort:
    at: int
    detail: str


ToolCommand = (
    Ask | Answer | Announce | RollCall | Conclude | Recess | Adjourn | RequestForComment | Acknowledge
)
SessionCommand = (
    Start | ToolCommand | Tick | TurnStarted | AskAnswered | AskEnded | AgentCrashed | LeadError | Abort
)
RecordingCommand = Ask | Announce | RequestForComment | Acknowledge  # those with an operation id

TOOLS: Mapping[type[ToolCommand], Tool] = {
    Ask: Tool.ASK,
    Answer: Tool.ANSWER,
    Announce: Tool.ANNOUNCE,
    RollCall: Tool.ROLL_CALL,
    Conclude: Tool.CONCLUDE,
    Recess: Tool.RECESS,
    Adjourn: Tool.ADJOURN,
    RequestForComment: Tool.REQUEST_FOR_COMMENT,
    Acknowledge: Tool.ACKNOWLEDGE,
}

COMMAND_NAMES: Mapping[type[SessionCommand], str] = {
    Start: "start",
    **{kind: str(tool) for kind, tool in TOOLS.items()},
    Tick: "tick",
    TurnStarted: "turn_started",
    AskAnswered: "ask_answered",
    AskEnded: "ask_ended",
    AgentCrashed: "agent_crashed",
    LeadError: "lead_error",
    Abort: "abort",
}


@attrs.frozen(cache_hash=True)
class Session:
    id: str
    mode: Mode
    lead: str
    members: Map[str, Member]  # the lead and every participant
    member_order: tuple[str, ...]  # the lead first
    started_at: int
    state: SessionState
    asks: Map[str, AskRecord]
    ask_order: tuple[str, ...]
    reminders: tuple[str, ...]  # the question ids reminded, in order: an id at most once (S2)
    violations: tuple[str, ...]  # the question ids released for no answer, in order
    announcements: tuple[Announcement, ...]
    rfcs: tuple[RequestRecord, ...]
    thread: tuple[ThreadPost, ...]
    operations: Map[str, RecordingCommand]  # accepted operation id -> its command
    lead_turns: int
    # Derived, so a tick does not scan ended asks; invariant S3 recomputes it.
    owed: Map[str, tuple[str, ...]]  # member -> its in-flight asks addressed to it, oldest first
    termination: Termination | None = None
    reason: str | None = None  # why it ended: the tool and its caller, the crash, the bound
    summary: str | None = None  # the text the concluding tool carried
    ended_at: int | None = None


# --- effects ------------------------------------------------------------------------------------------------
# What the daemon must do, after the session's change is durable. Ledger effects become team commands on the
# session's team; their outcomes come back as AskAnswered / AskEnded.


@attrs.frozen
class OpenAsk:
    question_id: str
    asker: str
    to: str
    text: str


@attrs.frozen
class PostAnswer:
    """The caller's reply may go to the ledger (team reply), which decides late, duplicate or conflicting."""

    question_id: str
    author: str


@attrs.frozen
class PostAnnouncement:
    announcement_id: str
    author: str
    recipients: tuple[str, ...]
    text: str


@attrs.frozen
class PostToThread:
    post_id: str
    kind: PostKind
    author: str
    text: str


@attrs.frozen
class SubmitReminder:
    participant: str
    question_id: str


@attrs.frozen
class ProtocolViolation:
    participant: str
    question_id: str


@attrs.frozen
class ReleaseAsker:
    """End the question `expired` with this reason in the ledger, so its asker stops waiting."""

    question_id: str
    reason: str = NO_ANSWER


@attrs.frozen
class CancelAsk:
    question_id: str
    reason: str


TraceValue = str | int | bool | None | tuple[str, ...]


@attrs.frozen
class TraceEvent:
    kind: TraceKind
    fields: Map[str, TraceValue]


SessionEffect = (
    OpenAsk
    | PostAnswer
    | PostAnnouncement
    | PostToThread
    | SubmitReminder
    | ProtocolViolation
    | ReleaseAsker
    | CancelAsk
    | TraceEvent
)


# --- tables -------------------------------------------------------------------------------------------------

R = Role
T = Tool
S = SessionState
A = AskState
AE = AskEvent

# Who leads each mode, what its participants are, and how many there are.
MODES: Mapping[Mode, tuple[Role, Role | None, Participants]] = {
    Mode.SUPERVISE: (R.SUPERVISOR, R.SUPERVISED_AGENT, Participants.ONE),
    Mode.FACILITATE: (R.FACILITATOR, R.FACILITATED_AGENT, Participants.MANY),
    Mode.DISCUSS: (R.DISCUSS_LEAD, R.DISCUSS_AGENT, Participants.MANY),
    Mode.JUDGE: (R.JUDGE, None, Participants.NONE),
    Mode.RUN: (R.RUNNER, None, Participants.NONE),
}

# The seed's tool surface, by role. A tool outside a role's set is `unauthorized` for that role.
ROLE_TOOLS: Mapping[Role, frozenset[Tool]] = {
    R.FACILITATOR: frozenset({T.ASK, T.ANSWER, T.ANNOUNCE, T.ROLL_CALL, T.CONCLUDE}),
    R.FACILITATED_AGENT: frozenset({T.ASK, T.ANSWER, T.ANNOUNCE, T.ROLL_CALL, T.REQUEST_FOR_COMMENT}),
    R.SUPERVISOR: frozenset({T.ASK, T.ANSWER, T.ANNOUNCE, T.ROLL_CALL, T.CONCLUDE}),
    R.SUPERVISED_AGENT: frozenset({T.ASK, T.ANSWER, T.ANNOUNCE, T.ROLL_CALL}),
    R.DISCUSS_LEAD: frozenset({T.ASK, T.ANSWER, T.ANNOUNCE, T.ROLL_CALL, T.RECESS, T.ADJOURN, T.ACKNOWLEDGE}),
    R.DISCUSS_AGENT: frozenset(
        {T.ASK, T.ANSWER, T.ANNOUNCE, T.ROLL_CALL, T.REQUEST_FOR_COMMENT, T.ACKNOWLEDGE}
    ),
    R.JUDGE: frozenset({T.CONCLUDE}),
    R.RUNNER: frozenset({T.CONCLUDE}),
}

# What each session state admits, and the state an admitted command leads to. `tick` and `turn_started` may
# still end a running session when it reaches a bound (section Bounds); an observation admitted in `ended`
# changes nothing.
SESSION_GATE: Mapping[tuple[SessionState, str], SessionState | ErrorCode] = {
    (S.RUNNING, "start"): E.CONFLICT,
    (S.RUNNING, "ask"): S.RUNNING,
    (S.RUNNING, "answer"): S.RUNNING,
    (S.RUNNING, "announce"): S.RUNNING,
    (S.RUNNING, "roll_call"): S.RUNNING,
    (S.RUNNING, "conclude"): S.ENDED,
    (S.RUNNING, "request_for_comment"): S.RUNNING,
    (S.RUNNING, "recess"): S.ENDED,
    (S.RUNNING, "adjourn"): S.ENDED,
    (S.RUNNING, "acknowledge"): S.RUNNING,
    (S.RUNNING, "tick"): S.RUNNING,
    (S.RUNNING, "turn_started"): S.RUNNING,
    (S.RUNNING, "ask_answered"): S.RUNNING,
    (S.RUNNING, "ask_ended"): S.RUNNING,
    (S.RUNNING, "agent_crashed"): S.ENDED,
    (S.RUNNING, "lead_error"): S.ENDED,
    (S.RUNNING, "abort"): S.ENDED,
    (S.ENDED, "start"): E.CONFLICT,
    (S.ENDED, "ask"): E.CONFLICT,
    (S.ENDED, "answer"): E.CONFLICT,
    (S.ENDED, "announce"): E.CONFLICT,
    (S.ENDED, "roll_call"): S.ENDED,
    (S.ENDED, "conclude"): E.CONFLICT,
    (S.ENDED, "request_for_comment"): E.CONFLICT,
    (S.ENDED, "recess"): E.CONFLICT,
    (S.ENDED, "adjourn"): E.CONFLICT,
    (S.ENDED, "acknowledge"): E.CONFLICT,
    (S.ENDED, "tick"): S.ENDED,
    (S.ENDED, "turn_started"): S.ENDED,
    (S.ENDED, "ask_answered"): S.ENDED,
    (S.ENDED, "ask_ended"): S.ENDED,
    (S.ENDED, "agent_crashed"): S.ENDED,
    (S.ENDED, "lead_error"): S.ENDED,
    (S.ENDED, "abort"): S.ENDED,
}

# How an ending command ends the session.
ENDINGS: Mapping[str, Termination] = {
    "conclude": Termination.CONCLUDED,
    "recess": Termination.CONCLUDED,
    "adjourn": Termination.CONCLUDED,
    "agent_crashed": Termination.STOPPED,
    "lead_error": Termination.STOPPED,
    "abort": Termination.STOPPED,
}

# An owed ask's lifecycle. Only an in-flight ask moves; an ended one ignores every later event (a late
# observation, a second cancel), so the first end is the one that stays.
ASK_TRANSITIONS: Mapping[tuple[AskState, AskEvent], AskState] = {
    (A.IN_FLIGHT, AE.ANSWERED): A.ANSWERED,
    (A.IN_FLIGHT, AE.ENDED): A.ENDED,
    (A.IN_FLIGHT, AE.REMIND): A.IN_FLIGHT,
    (A.IN_FLIGHT, AE.RELEASE): A.RELEASED,
    (A.IN_FLIGHT, AE.CANCEL): A.CANCELLED,
    **{(state, event): state for state in AskState if state is not A.IN_FLIGHT for event in AskEvent},
}

SessionOutcome = Accepted[Session] | Rejected


def step(
    session: Session | None, command: SessionCommand, limits: SessionLimits = DEFAULT_SESSION_LIMITS
) -> SessionOutcome:
    """Apply one command to the session (None: none started yet). Never raises for any command value."""
    if isinstance(command, Start):
        return _start(session, command, limits)
    if session is None:
        return reject(E.NOT_FOUND, "no session was started")
    name = COMMAND_NAMES[type(command)]
    if isinstance(command, ToolCommand):
        refused = _allowed(session, command.actor, TOOLS[type(command)])
        if refused is not None:
            return refused
        repeat = _repeat(session, command)
        if repeat is not None:
            return repeat
    gate = SESSION_GATE[(session.state, name)]
    if isinstance(gate, ErrorCode):
        return reject(gate, f"the session {session.termination} ({session.reason}); '{name}' is not possible")
    if session.state is S.ENDED and not isinstance(command, RollCall):
        return unchanged(session)
    return _HANDLERS[type(command)](session, command, limits)


def next_deadline(session: Session, limits: SessionLimits = DEFAULT_SESSION_LIMITS) -> int | None:
    """When the daemon must send the next Tick: the earliest reminder or violation due, or the end."""
    if session.state is S.ENDED:
        return None
    due = [session.started_at + limits.session_ms]
    for ids in session.owed.values():
        due.extend(_due_at(session.asks[question_id], limits) for question_id in ids)
    return min(due)


def owed_by(session: Session, member: str) -> tuple[str, ...]:
    """The in-flight question ids `member` owes an answer to, oldest first."""
    return session.owed.get(member, ())


def in_flight(session: Session) -> tuple[str, ...]:
    return tuple(qid for qid in session.ask_order if session.asks[qid].state is A.IN_FLIGHT)


def ask_ids(op: str, targets: tuple[str, ...]) -> tuple[str, ...]:
    """Question ids are derived from the Ask's operation id, never drawn, so a retried Ask opens the same."""
    return (op,) if len(targets) == 1 else tuple(f"{op}:{target}" for target in targets)


# --- checks -------------------------------------------------------------------------------------------------


def _allowed(session: Session, actor: str, tool: Tool) -> Rejected | None:
    member = session.members.get(actor)
    if member is None:
        return reject(E.UNAUTHORIZED, f"{actor!r} is not a member of session {session.id!r}")
    if tool not in ROLE_TOOLS[member.role]:
        return reject(E.UNAUTHORIZED, f"a {member.role} has no {tool} tool")
    return None


def _repeat(session: Session, command: SessionCommand) -> SessionOutcome | None:
    if not isinstance(command, RecordingCommand):
        return None
    existing = session.operations.get(command.op)
    if existing is None:
        return None
    if type(existing) is not type(command) or replace(existing, at=command.at) != command:
        return reject(E.CONFLICT, f"operation id {command.op!r} was already used for a different call")
    if isinstance(command, Ask):
        return unchanged(session, tuple(q for q in session.ask_order if session.asks[q].op == command.op))
    return unchanged(session, command.op)


def _check_id(value: str, what: str, limits: SessionLimits) -> Rejected | None:
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


# --- start --------------------------------------------------------------------------------------------------


def _start(session: Session | None, command: Start, limits: SessionLimits) -> SessionOutcome:
    if session is not None:
        same = (session.id, session.mode, session.lead, session.member_order[1:]) == (
            command.session_id,
            command.mode,
            command.lead,
            command.participants,
        )
        return unchanged(session, session) if same else reject(E.CONFLICT, f"session {session.id!r} exists")
    lead_role, participant_role, count = MODES[command.mode]
    names = (command.lead, *command.participants)
    wanted = {
        Participants.NONE: len(command.participants) == 0,
        Participants.ONE: len(command.participants) == 1,
        Participants.MANY: len(command.participants) >= 1,
    }[count]
    problem = _first(
        _check_id(command.session_id, "session id", limits),
        *(_check_id(name, "member name", limits) for name in names),
        None if wanted else reject(E.BAD_REQUEST, f"a {command.mode} session takes {count} participants"),
        None
        if len(command.participants) <= limits.participants
        else reject(
            E.BOUND_EXCEEDED, f"a session has at most {limits.participants} participants", "participants"
        ),
        None if len(set(names)) == len(names) else reject(E.BAD_REQUEST, "a member is named twice"),
    )
    if problem:
        return problem
    members = {command.lead: Member(command.lead, lead_role, command.at)}
    if participant_role is not None:  # None only in a mode that takes no participants
        members.update({name: Member(name, participant_role, command.at) for name in command.participants})
    session = Session(
        id=command.session_id,
        mode=command.mode,
        lead=command.lead,
        members=Map(members),
        member_order=names,
        started_at=command.at,
        state=S.RUNNING,
        asks=Map(),
        ask_order=(),
        reminders=(),
        violations=(),
        announcements=(),
        rfcs=(),
        thread=(),
        operations=Map(),
        lead_turns=0,
        owed=Map({name: () for name in names}),
    )
    started = _trace(TraceKind.SESSION_START, session=session.id, mode=str(session.mode), lead=session.lead)
    agents = tuple(
        _trace(TraceKind.AGENT_START, session=session.id, name=name, role=str(members[name].role))
        for name in names
    )
    return Accepted(session, session, effects=(started, *agents))


# --- tools --------------------------------------------------------------------------------------------------


def _ask(session: Session, command: Ask, limits: SessionLimits) -> SessionOutcome:
    targets = _targets(session, command)
    if isinstance(targets, Rejected):
        return targets
    ids = ask_ids(command.op, targets)
    problem = _first(
        _check_id(command.op, "ask id", limits),
        *(_check_id(question_id, "question id", limits) for question_id in ids),
        next((reject(E.CONFLICT, f"question {q!r} exists") for q in ids if q in session.asks), None),
        None
        if len(session.ask_order) + len(ids) <= limits.asks
        else reject(E.BOUND_EXCEEDED, f"a session opens at most {limits.asks} asks", "asks"),
    )
    if problem:
        return problem
    asks, owed = session.asks, session.owed
    for question_id, target in zip(ids, targets, strict=True):
        asks = asks.set(
            question_id, AskRecord(question_id, command.op, command.actor, target, command.at, A.IN_FLIGHT)
        )
        owed = owed.set(target, (*owed[target], question_id))
    session = replace(
        _active(session, command.actor, command.at),
        asks=asks,
        ask_order=(*session.ask_order, *ids),
        owed=owed,
        operations=session.operations.set(command.op, command),
    )
    effects = tuple(
        OpenAsk(q, command.actor, target, command.text) for q, target in zip(ids, targets, strict=True)
    )
    return Accepted(session, ids, effects=effects)


def _targets(session: Session, command: Ask) -> tuple[str, ...] | Rejected:
    """Seed: "Ask's to accepts a participant name on multi-participant roles (facilitator, discuss lead, all
    participants). The supervise pair has only one possible target, so it rejects to." A lead that omits `to`
    asks every participant; a participant that omits it asks the lead."""
    others = tuple(name for name in session.member_order if name != command.actor)
    if session.mode is Mode.SUPERVISE:
        if command.to is not None:
            return reject(E.BAD_REQUEST, "a supervise session has one possible target; Ask takes no 'to'")
        return others
    is_lead = command.actor == session.lead
    if command.to is None:
        return others if is_lead else (session.lead,)
    if command.to == command.actor:
        return reject(E.BAD_REQUEST, "a member does not ask itself")
    if command.to not in session.members:
        return reject(E.NOT_FOUND, f"no participant {command.to!r} in session {session.id!r}")
    return (command.to,)


def _answer(session: Session, command: Answer, limits: SessionLimits) -> SessionOutcome:
    owed = owed_by(session, command.actor)
    if command.question_id is None:
        listed = ", ".join(owed) if owed else "none"
        return reject(E.BAD_REQUEST, f"an answer names the question it answers; questions you owe: {listed}")
    ask = session.asks.get(command.question_id)
    if ask is None:
        return reject(E.NOT_FOUND, f"no question {command.question_id!r} in session {session.id!r}")
    if ask.to != command.actor:
        return reject(E.WRONG_MEMBER, f"question {ask.id!r} is addressed to {ask.to!r}")
    return Accepted(
        _active(session, command.actor, command.at), ask.id, effects=(PostAnswer(ask.id, command.actor),)
    )


def _announce(session: Session, command: Announce, limits: SessionLimits) -> SessionOutcome:
    problem = _first(
        _check_id(command.op, "announcement id", limits),
        _check_text(command.text, "announcement", limits.announcement_chars, "announcement_chars"),
        None
        if len(session.announcements) < limits.announcements
        else reject(
            E.BOUND_EXCEEDED,
            f"a session makes at most {limits.announcements} announcements",
            "announcements",
        ),
    )
    if problem:
        return problem
    recipients = tuple(name for name in session.member_order if name != command.actor)
    note = Announcement(command.op, command.actor, command.at, command.text, recipients)
    session = replace(
        _active(session, command.actor, command.at),
        announcements=(*session.announcements, note),
        operations=session.operations.set(command.op, command),
    )
    return Accepted(
        session, note.id, effects=(PostAnnouncement(note.id, note.author, recipients, note.text),)
    )


def _roll_call(session: Session, command: RollCall, limits: SessionLimits) -> SessionOutcome:
    return unchanged(session, roll_call(session))


def roll_call(session: Session) -> tuple[RollCallEntry, ...]:
    members = (session.members[name] for name in session.member_order)
    return tuple(
        RollCallEntry(member.name, member.role, owed_by(session, member.name), member.last_activity_at)
        for member in members
    )


def _conclude(
    session: Session, command: Conclude | Recess | Adjourn, limits: SessionLimits
) -> SessionOutcome:
    problem = _check_text(command.summary, "summary", limits.text_chars, "text_chars", required=False)
    if problem:
        return problem
    name = COMMAND_NAMES[type(command)]
    session = replace(_active(session, command.actor, command.at), summary=command.summary)
    return _end(session, command.at, ENDINGS[name], f"{name} by {command.actor}", ())


def _request_for_comment(
    session: Session, command: RequestForComment, limits: SessionLimits
) -> SessionOutcome:
    problem = _first(
        _check_id(command.op, "request id", limits),
        _check_text(command.text, "request for comment", limits.text_chars, "text_chars"),
        None
        if len(session.rfcs) < limits.rfcs
        else reject(E.BOUND_EXCEEDED, f"a session records at most {limits.rfcs} requests", "rfcs"),
    )
    if problem:
        return problem
    request = RequestRecord(command.op, command.actor, command.at, command.text)
    session = replace(
        _active(session, command.actor, command.at),
        rfcs=(*session.rfcs, request),
        operations=session.operations.set(command.op, command),
    )
    return Accepted(session, request.id)


def _acknowledge(session: Session, command: Acknowledge, limits: SessionLimits) -> SessionOutcome:
    problem = _first(
        _check_id(command.op, "acknowledgement id", limits),
        _check_text(command.text, "acknowledgement", limits.text_chars, "text_chars"),
        _thread_room(session, limits),
    )
    if problem:
        return problem
    post = ThreadPost(command.op, PostKind.ACKNOWLEDGE, command.actor, command.at, command.text)
    session = replace(
        _active(session, command.actor, command.at),
        thread=(*session.thread, post),
        operations=session.operations.set(command.op, command),
    )
    return Accepted(session, post.id, effects=(PostToThread(post.id, post.kind, post.author, post.text),))


def _thread_room(session: Session, limits: SessionLimits) -> Rejected | None:
    if len(session.thread) < limits.thread_posts:
        return None
    return reject(E.BOUND_EXCEEDED, f"a thread holds at most {limits.thread_posts} posts", "thread_posts")


# --- the loop -----------------------------------------------------------------------------------------------


def _tick(session: Session, command: Tick, limits: SessionLimits) -> SessionOutcome:
    """Seed: "On an unanswered owed Ask, the participant injects one synthetic reminder. It then emits
    protocol_violation. It unblocks the asker" -- with no synthetic answer: the ledger ends it no_answer."""
    at = command.at
    if at >= session.started_at + limits.session_ms:
        return _end(session, at, Termination.STOPPED, "session_length", ())
    due = [session.asks[qid] for qid in in_flight(session) if at >= _due_at(session.asks[qid], limits)]
    effects: list[SessionEffect] = []
    for ask in due:
        if ask.reminded_at is not None:
            session = _move(session, ask, AE.RELEASE, at, NO_ANSWER)
            session = replace(session, violations=(*session.violations, ask.id))
            effects += [
                ProtocolViolation(ask.to, ask.id),
                _trace(
                    TraceKind.PROTOCOL_VIOLATION,
                    session=session.id,
                    participant=ask.to,
                    question=ask.id,
                    asker=ask.asker,
                    reason=NO_ANSWER,
                ),
                ReleaseAsker(ask.id),  # after the violation is traced: the trace reads in the seed's order
            ]
    reminding = [ask for ask in due if ask.reminded_at is None]
    if len(session.reminders) + len(reminding) > limits.reminders:
        # No reminder of this tick is sent: each would be cancelled by the stop in the same step.
        return _end(session, at, Termination.STOPPED, "reminder_limit", tuple(effects))
    for ask in reminding:
        session = _move(session, ask, AE.REMIND, at, None)
        session = replace(session, reminders=(*session.reminders, ask.id))
        effects.append(SubmitReminder(ask.to, ask.id))
    return Accepted(session, effects=tuple(effects)) if due else unchanged(session)


def _due_at(ask: AskRecord, limits: SessionLimits) -> int:
    if ask.reminded_at is None:
        return ask.created_at + limits.reminder_after_ms
    return ask.reminded_at + limits.violation_after_ms


def _turn_started(session: Session, command: TurnStarted, limits: SessionLimits) -> SessionOutcome:
    if command.member not in session.members:
        return reject(E.NOT_FOUND, f"no member {command.member!r} in session {session.id!r}")
    active = _active(session, command.member, command.at)
    if command.member != session.lead:
        return unchanged(session) if active == session else Accepted(active)
    session = active
    if session.lead_turns >= limits.lead_turns:
        limit = _trace(
            TraceKind.LEAD_TURN_LIMIT, session=session.id, lead=session.lead, turns=session.lead_turns
        )
        return _end(session, command.at, Termination.STOPPED, "lead_turn_limit", (limit,))
    return Accepted(replace(session, lead_turns=session.lead_turns + 1))


def _ask_answered(session: Session, command: AskAnswered, limits: SessionLimits) -> SessionOutcome:
    ask = session.asks.get(command.question_id)
    if ask is None or ask.state is not A.IN_FLIGHT:
        return unchanged(session)  # not a session ask, or a late answer: the ledger keeps it attributable
    session = _active(_move(session, ask, AE.ANSWERED, command.at, None), ask.to, command.at)
    if session.mode is not Mode.DISCUSS or ask.asker != session.lead:
        return Accepted(session)
    # Seed: "Answer calls routed to the lead stream to the discussion thread as the agents produce them."
    if _thread_room(session, limits) is not None:
        return Accepted(session)  # the answer stays in the ledger; the thread is full
    post = ThreadPost(ask.id, PostKind.ANSWER, ask.to, command.at, "")
    session = replace(session, thread=(*session.thread, post))
    return Accepted(session, effects=(PostToThread(post.id, post.kind, post.author, post.text),))


def _ask_ended(session: Session, command: AskEnded, limits: SessionLimits) -> SessionOutcome:
    ask = session.asks.get(command.question_id)
    if ask is None or ask.state is not A.IN_FLIGHT:
        return unchanged(session)
    return Accepted(_move(session, ask, AE.ENDED, command.at, command.reason))


def _stop(
    session: Session, command: AgentCrashed | LeadError | Abort, limits: SessionLimits
) -> SessionOutcome:
    name = COMMAND_NAMES[type(command)]
    if isinstance(command, AgentCrashed):
        if command.member not in session.members:
            return reject(E.NOT_FOUND, f"no member {command.member!r} in session {session.id!r}")
        reason = f"agent_crashed: {command.member}: {command.detail}"
    else:
        reason = f"{name}: {command.detail}"
    return _end(session, command.at, ENDINGS[name], reason, ())


# --- shared moves -------------------------------------------------------------------------------------------


def _end(
    session: Session, at: int, termination: Termination, reason: str, effects: tuple[SessionEffect, ...]
) -> SessionOutcome:
    """End the session: every ask still in flight is cancelled with a reason its asker sees. Seed: "It also
    cancels in-flight Asks, so askers see why nobody will answer their question." """
    cancel_reason = f"session {session.id} {termination}: {reason}"
    cancels: list[SessionEffect] = []
    for question_id in in_flight(session):
        session = _move(session, session.asks[question_id], AE.CANCEL, at, cancel_reason)
        cancels.append(CancelAsk(question_id, cancel_reason))
    session = replace(session, state=S.ENDED, termination=termination, reason=reason, ended_at=at)
    return Accepted(session, session, effects=(*effects, *cancels, _summary(session)))


def _summary(session: Session) -> TraceEvent:
    states = [session.asks[question_id].state for question_id in session.ask_order]
    return _trace(
        TraceKind.SUMMARY,
        session=session.id,
        mode=str(session.mode),
        termination=str(session.termination),
        reason=session.reason,
        success=session.termination is Termination.CONCLUDED,
        duration_ms=(session.ended_at or session.started_at) - session.started_at,
        lead_turns=session.lead_turns,
        asks=len(states),
        answered=states.count(A.ANSWERED),
        cancelled=states.count(A.CANCELLED),
        reminders=len(session.reminders),
        violations=session.violations,
        announcements=len(session.announcements),
        rfcs=len(session.rfcs),
    )


def _move(session: Session, ask: AskRecord, event: AskEvent, at: int, reason: str | None) -> Session:
    state = ASK_TRANSITIONS[(ask.state, event)]
    if event is AE.REMIND:
        moved = replace(ask, reminded_at=at)
    else:
        moved = replace(ask, state=state, ended_at=at, reason=reason)
    owed = session.owed
    if state is not A.IN_FLIGHT:
        owed = owed.set(ask.to, tuple(q for q in owed[ask.to] if q != ask.id))
    return replace(session, asks=session.asks.set(ask.id, moved), owed=owed)


def _active(session: Session, member: str, at: int) -> Session:
    record = session.members[member]
    if record.last_activity_at >= at:
        return session
    return replace(session, members=session.members.set(member, replace(record, last_activity_at=at)))


def _trace(kind: TraceKind, **fields: TraceValue) -> TraceEvent:
    return TraceEvent(kind, Map(fields))


Handler = Callable[[Session, SessionCommand, SessionLimits], SessionOutcome]

_HANDLERS: dict[type[SessionCommand], Handler] = {
    Ask: _ask,  # type: ignore[dict-item]
    Answer: _answer,  # type: ignore[dict-item]
    Announce: _announce,  # type: ignore[dict-item]
    RollCall: _roll_call,  # type: ignore[dict-item]
    Conclude: _conclude,  # type: ignore[dict-item]
    Recess: _conclude,  # type: ignore[dict-item]
    Adjourn: _conclude,  # type: ignore[dict-item]
    RequestForComment: _request_for_comment,  # type: ignore[dict-item]
    Acknowledge: _acknowledge,  # type: ignore[dict-item]
    Tick: _tick,  # type: ignore[dict-item]
    TurnStarted: _turn_started,  # type: ignore[dict-item]
    AskAnswered: _ask_answered,  # type: ignore[dict-item]
    AskEnded: _ask_ended,  # type: ignore[dict-item]
    AgentCrashed: _stop,  # type: ignore[dict-item]
    LeadError: _stop,  # type: ignore[dict-item]
    Abort: _stop,  # type: ignore[dict-item]
}
