# The owner's team ledger as a reducer: `step(ledger, command) -> Accepted | Rejected`.
#
# Rules (spec/team-v1.md is the authority; the tables below are checked equal to its tables):
# - Checks run in one fixed order: team exists, authority, idempotent repeat, team state gate (TEAM_GATE),
#   then the command's own validation and bounds. A repeat of an accepted operation therefore returns the
#   existing record even after the team was archived or a bound filled up since.
# - A question moves only along QUESTION_TRANSITIONS. A reply to an expired or cancelled question is kept with
#   `late: true`, and never produces a continuation notice. The reason a cancel or an owner's expire gives is
#   set by the step that ends the question and never changes after it (a reason is never an answer).
# - Every accepted change bumps the team's revision by exactly one; a no-op or a repeat changes nothing.
# - A rejection returns the ledger it was given, untouched.
from __future__ import annotations

import bisect
import enum
import re
from collections.abc import Callable, Mapping

import attrs
from immutables import Map

from .actions import OWNER_COMMANDS
from .commands import (
    COMMAND_NAMES,
    AddMember,
    ArchiveTeam,
    Ask,
    Cancel,
    CreateTeam,
    Expire,
    NewMember,
    PauseTeam,
    RecordDelivery,
    RemoveMember,
    Reply,
    ResumeTeam,
    TeamCommand,
    Tick,
)
from .delivery import DeliveryState, Reason
from .effects import (
    ArmTimer,
    HoldTeam,
    LateAnswerKept,
    QuestionEnded,
    ReleaseTeam,
    SubmitNotice,
    TeamChanged,
    WithdrawMember,
    WithdrawNotice,
    WithdrawTeam,
    notice_id,
    parse_notice_id,
)
from .errors import ErrorCode, Rejected
from .limits import DEFAULT_LIMITS, MINUTE_MS, Limits
from .outcome import Accepted, reject, unchanged
from .records import (
    ID_PATTERN,
    REASON_PATTERN,
    USER,
    Answer,
    DeliveryView,
    Exchange,
    Ledger,
    Membership,
    MembershipState,
    NoticeKind,
    QuestionState,
    Team,
    TeamState,
)
from .values import replace

E = ErrorCode
Q = QuestionState
T = TeamState


class QuestionEvent(enum.StrEnum):
    REPLY = "reply"
    CANCEL = "cancel"
    EXPIRE = "expire"
    ARCHIVE = "archive"


# The question state machine. An ErrorCode entry rejects the command; a same-state entry is a no-op, except
# that a reply there records a late answer.
QUESTION_TRANSITIONS: Mapping[tuple[QuestionState, QuestionEvent], QuestionState | ErrorCode] = {
    (Q.OPEN, QuestionEvent.REPLY): Q.ANSWERED,
    (Q.OPEN, QuestionEvent.CANCEL): Q.CANCELLED,
    (Q.OPEN, QuestionEvent.EXPIRE): Q.EXPIRED,
    (Q.OPEN, QuestionEvent.ARCHIVE): Q.CANCELLED,
    (Q.ANSWERED, QuestionEvent.REPLY): E.CONFLICT,
    (Q.ANSWERED, QuestionEvent.CANCEL): E.CONFLICT,
    (Q.ANSWERED, QuestionEvent.EXPIRE): Q.ANSWERED,
    (Q.ANSWERED, QuestionEvent.ARCHIVE): Q.ANSWERED,
    (Q.EXPIRED, QuestionEvent.REPLY): Q.EXPIRED,
    (Q.EXPIRED, QuestionEvent.CANCEL): E.EXPIRED,
    (Q.EXPIRED, QuestionEvent.EXPIRE): Q.EXPIRED,
    (Q.EXPIRED, QuestionEvent.ARCHIVE): Q.EXPIRED,
    (Q.CANCELLED, QuestionEvent.REPLY): Q.CANCELLED,
    (Q.CANCELLED, QuestionEvent.CANCEL): Q.CANCELLED,
    (Q.CANCELLED, QuestionEvent.EXPIRE): Q.CANCELLED,
    (Q.CANCELLED, QuestionEvent.ARCHIVE): Q.CANCELLED,
}

# The team lifecycle, and which commands each team state admits. Commands that are not lifecycle commands
# keep the team's state when admitted. Pause holds, it does not refuse: a paused team still takes asks and
# replies (bounds apply as ever), and the desk holds their notices until resume releases them.
TEAM_GATE: Mapping[tuple[TeamState, str], TeamState | ErrorCode] = {
    (T.ACTIVE, "pause"): T.PAUSED,
    (T.ACTIVE, "resume"): T.ACTIVE,
    (T.ACTIVE, "archive"): T.ARCHIVED,
    (T.ACTIVE, "add"): T.ACTIVE,
    (T.ACTIVE, "remove"): T.ACTIVE,
    (T.ACTIVE, "ask"): T.ACTIVE,
    (T.ACTIVE, "reply"): T.ACTIVE,
    (T.ACTIVE, "cancel"): T.ACTIVE,
    (T.ACTIVE, "expire"): T.ACTIVE,
    (T.ACTIVE, "tick"): T.ACTIVE,
    (T.ACTIVE, "record_delivery"): T.ACTIVE,
    (T.PAUSED, "pause"): T.PAUSED,
    (T.PAUSED, "resume"): T.ACTIVE,
    (T.PAUSED, "archive"): T.ARCHIVED,
    (T.PAUSED, "add"): T.PAUSED,
    (T.PAUSED, "remove"): T.PAUSED,
    (T.PAUSED, "ask"): T.PAUSED,
    (T.PAUSED, "reply"): T.PAUSED,
    (T.PAUSED, "cancel"): T.PAUSED,
    (T.PAUSED, "expire"): T.PAUSED,
    (T.PAUSED, "tick"): T.PAUSED,
    (T.PAUSED, "record_delivery"): T.PAUSED,
    (T.ARCHIVED, "pause"): E.TEAM_ARCHIVED,
    (T.ARCHIVED, "resume"): E.TEAM_ARCHIVED,
    (T.ARCHIVED, "archive"): T.ARCHIVED,
    (T.ARCHIVED, "add"): E.TEAM_ARCHIVED,
    (T.ARCHIVED, "remove"): E.TEAM_ARCHIVED,
    (T.ARCHIVED, "ask"): E.TEAM_ARCHIVED,
    (T.ARCHIVED, "reply"): E.TEAM_ARCHIVED,
    (T.ARCHIVED, "cancel"): E.TEAM_ARCHIVED,
    (T.ARCHIVED, "expire"): E.TEAM_ARCHIVED,
    (T.ARCHIVED, "tick"): T.ARCHIVED,
    (T.ARCHIVED, "record_delivery"): T.ARCHIVED,
}


TeamOutcome = Accepted[Team] | Rejected


def step(
    ledger: Ledger, command: TeamCommand, limits: Limits = DEFAULT_LIMITS
) -> Accepted[Ledger] | Rejected:
    """Apply one command to the owner's ledger. Never raises for any command value."""
    name = COMMAND_NAMES[type(command)]
    if name in OWNER_COMMANDS and command.member_key is not None:
        return reject(E.UNAUTHORIZED, f"'{name}' is an owner operation; member keys cannot manage a team")
    if isinstance(command, CreateTeam):
        return _create_team(ledger, command, limits)
    team = ledger.teams.get(command.team_id)
    if team is None:
        return reject(E.NOT_FOUND, f"no team {command.team_id!r}")
    actor = _actor(team, command.member_key)
    if isinstance(actor, Rejected):
        return actor
    repeat = _repeat(team, command, actor)
    if repeat is not None:
        return repeat if isinstance(repeat, Rejected) else unchanged(ledger, repeat)
    gate = TEAM_GATE[(team.state, name)]
    if isinstance(gate, ErrorCode):
        return reject(gate, f"team {team.id!r} is {team.state}; '{name}' is not possible")
    outcome = _HANDLERS[type(command)](team, command, actor, limits)
    if isinstance(outcome, Rejected):
        return outcome
    return _commit(ledger, team, outcome)


# The bounds that only admit new work (section 5 with an error, and the desk's). A journal entry was admitted
# once, under the limits of its day; replaying it must not ask again, or a bound lowered since
# (HARNESS_LIMITS at a restart) would refuse the store's own history and stop it as corrupt. What limits
# decide beyond admission (the default ttl, expiry, write timing) is kept, so replay rebuilds the same state.
ADMISSION_BOUNDS = (
    "teams",
    "memberships",
    "exchanges",
    "pending_per_sender",
    "asks_per_minute",
    "parent_chain",
    "question_chars",
    "context_chars",
    "answer_chars",
    "evidence_refs",
    "evidence_ref_chars",
    "name_chars",
    "id_chars",
    "ttl_max_ms",
    "notice_bytes",
    "queued_per_agent",
    "delivery_records",
)
_UNBOUNDED = 2**62


def replay_limits(limits: Limits) -> Limits:
    """`limits` with every admission bound lifted: what a replay of accepted commands steps with."""
    lifted = {name: _UNBOUNDED for name in ADMISSION_BOUNDS}
    return attrs.evolve(limits, ttl_min_ms=0, **lifted)


def next_deadline(team: Team) -> int | None:
    """When the shell must send the next Tick for this team."""
    return team.open_deadlines[0][0] if team.open_deadlines else None


def resolve_member(team: Team, ref: str) -> Membership | None:
    """An active member by membership id or by name (names are unique among active members)."""
    member = team.members.get(ref)
    if member is not None and member.state is MembershipState.ACTIVE:
        return member
    for member_id in team.member_order:
        member = team.members[member_id]
        if member.name == ref and member.state is MembershipState.ACTIVE:
            return member
    return None


def actor_of(team: Team, member_key: str | None) -> Membership | Rejected | None:
    """The membership a key speaks for; None is the owner."""
    return _actor(team, member_key)


def may_read(viewer: Membership | None, exchange: Exchange) -> bool:
    """The owner reads every question; a member only the questions it asked or was asked."""
    return viewer is None or viewer.id in (exchange.from_, exchange.to)


def visible_exchange(team: Team, viewer: Membership | None, question_id: str) -> Exchange | Rejected:
    """The question `question_id`, as `viewer` may name it to read, reply, cancel or follow up. One the
    viewer may not read answers exactly as an id that does not exist, so a member learns neither that another
    pair's question exists nor who asked whom."""
    exchange = team.exchanges.get(question_id)
    if exchange is None or not may_read(viewer, exchange):
        return reject(E.NOT_FOUND, f"no question {question_id!r} of yours in team {team.id!r}")
    return exchange


def _actor(team: Team, member_key: str | None) -> Membership | Rejected | None:
    if member_key is None:
        return None
    member_id = team.keys.get(member_key)
    if member_id is None:
        return reject(
            E.UNAUTHORIZED, f"the member key is not valid for team {team.id!r} (removed, or another team's)"
        )
    return team.members[member_id]


def _commit(ledger: Ledger, before: Team, outcome: Accepted[Team]) -> Accepted[Ledger]:
    if not outcome.changed:
        return unchanged(ledger, outcome.result)
    team = replace(outcome.state, revision=before.revision + 1)
    effects = outcome.effects
    deadline = next_deadline(team)
    if deadline is not None and deadline != next_deadline(before):
        effects = (*effects, ArmTimer(team.id, deadline))
    result = outcome.result
    if isinstance(result, Team):
        result = team
    return Accepted(
        Ledger(ledger.teams.set(team.id, team)),
        result,
        (*outcome.events, TeamChanged(team.id, team.revision)),
        effects,
    )


# --- the notices a team owes -------------------------------------------------------------------------------


def introduction_notice(team: Team, member: Membership, limits: Limits) -> SubmitNotice:
    return _notice(team, member.id, NoticeKind.INTRODUCTION, member, member.joined_at + limits.notice_ttl_ms)


# Joins a membership id and the time of a fresh introduction in its notice id's subject (`t1/mem2~T/...`):
# ids never hold it, so the membership is always recoverable, and the id is new, so no desk takes it for
# the first introduction it may hold as `expired`.
REINTRODUCED = "~"
_REINTRODUCED_AT = re.compile(r"[0-9]{1,15}")  # epoch ms, ASCII: `int` of it never raises


def introduction_subject(subject_id: str) -> tuple[str, int | None] | None:
    """The membership an introduction notice's subject names and the time of its re-introduction (None: the
    first introduction), or None when the subject names none (a mark that is not a time)."""
    membership_id, mark, at = subject_id.partition(REINTRODUCED)
    if mark and not _REINTRODUCED_AT.fullmatch(at):
        return None
    return membership_id, int(at) if mark else None


def reintroductions(
    team: Team, machine_id: str, agent_id: str, at: int, limits: Limits
) -> tuple[SubmitNotice, ...]:
    """A fresh introduction of the active membership of `team` that agent `machine_id`/`agent_id` holds, for
    when that agent attaches: its first introduction expires `notice_ttl_ms` after it joined (seed: 24 h),
    perhaps before the agent ever ran, and an agent started again has lost what it was told. Not recorded
    in the ledger (it changes no team state) and so never restated; nothing for an archived team."""
    if team.state is T.ARCHIVED:
        return ()
    return tuple(
        replace(
            introduction_notice(team, member, limits),
            notice_id=notice_id(team.id, f"{member.id}{REINTRODUCED}{at}", NoticeKind.INTRODUCTION),
            expires_at=at + limits.notice_ttl_ms,
        )
        for member_id in team.member_order
        if (member := team.members[member_id]).state is MembershipState.ACTIVE
        and (member.machine_id, member.agent_id) == (machine_id, agent_id)
    )


def question_notice(team: Team, exchange: Exchange) -> SubmitNotice:
    return _notice(team, exchange.id, NoticeKind.QUESTION, team.members[exchange.to], exchange.deadline_at)


def answer_notice(team: Team, exchange: Exchange, limits: Limits) -> SubmitNotice:
    assert exchange.answer is not None
    expires_at = exchange.answer.at + limits.notice_ttl_ms
    return _notice(team, exchange.id, NoticeKind.ANSWER, team.members[exchange.from_], expires_at)


def _notice(team: Team, subject_id: str, kind: NoticeKind, to: Membership, expires_at: int) -> SubmitNotice:
    return SubmitNotice(
        team.id,
        notice_id(team.id, subject_id, kind),
        kind,
        subject_id,
        to.id,
        to.machine_id,
        to.agent_id,
        expires_at,
    )


def owed_view(team: Team, at: int) -> DeliveryView:
    """The owner's view of a notice it just came to owe, before its desk reported anything: it waits
    (`held` while the team is paused), never blank (contract: `delivery` is `queued` from the moment the
    ask is accepted, with its reason; `unobserved`: no look at the terminal yet)."""
    if team.state is T.PAUSED:
        return DeliveryView(DeliveryState.HELD.value, Reason.PAUSED.value, at)
    return DeliveryView(DeliveryState.QUEUED.value, Reason.UNOBSERVED.value, at)


def _resumes_asker(team: Team, exchange: Exchange) -> bool:
    """An on-time answer owes its asker a continuation, unless it asked for none or never asked itself."""
    asker = team.members[exchange.from_]
    return exchange.notify and not exchange.by_user and asker.state is MembershipState.ACTIVE


def owed_notices(team: Team, limits: Limits = DEFAULT_LIMITS) -> tuple[SubmitNotice, ...]:
    """Every notice the team still owes a terminal, derived from the ledger alone: what a daemon resubmits
    after a crash that came between a durable ledger change and its destination's durable submit.
    Destinations deduplicate by notice id, so resubmitting one they already hold is harmless."""
    if team.state is T.ARCHIVED:
        return ()
    owed = [
        introduction_notice(team, member, limits)
        for member_id in team.member_order
        if (member := team.members[member_id]).state is MembershipState.ACTIVE
    ]
    for exchange_id in team.exchange_order:
        exchange = team.exchanges[exchange_id]
        if exchange.state is Q.OPEN and team.members[exchange.to].state is MembershipState.ACTIVE:
            owed.append(question_notice(team, exchange))
        elif exchange.state is Q.ANSWERED and _resumes_asker(team, exchange):  # answered: on time (T3)
            owed.append(answer_notice(team, exchange, limits))
    return tuple(owed)


def owed_machines(team: Team) -> frozenset[str]:
    """The machines `owed_notices` names, without making the notices (a start's guards need only these, and
    at the seed's bounds a team owes some 450 notices): every active member is owed its introduction, and
    every other owed notice goes to an active member."""
    if team.state is T.ARCHIVED:
        return frozenset()
    return frozenset(m.machine_id for m in team.members.values() if m.state is MembershipState.ACTIVE)


RestatedGuard = HoldTeam | ReleaseTeam | WithdrawTeam | WithdrawMember | WithdrawNotice
RestatedEffect = RestatedGuard | SubmitNotice


def restatement(team: Team, limits: Limits = DEFAULT_LIMITS) -> tuple[RestatedEffect, ...]:
    """Everything a destination must have been told about the team, derived from the ledger alone, in the
    order to tell it: whether it is held (or withdrawn, archived), the memberships and question notices that
    are moot, then every owed notice. A daemon restates it after a restart, since a crash can fall between a
    durable ledger change and the destination's durable receipt of any effect; each desk command is
    idempotent, so restating what a desk already has changes nothing there."""
    return restated_guards(team) + owed_notices(team, limits)


def restated_guards(team: Team) -> tuple[RestatedGuard, ...]:
    """`restatement` but the owed notices: whether the team is held (or withdrawn, archived), and the
    memberships and question notices that are moot."""
    if team.state is T.ARCHIVED:
        return (WithdrawTeam(team.id),)
    effects: list[RestatedGuard] = [HoldTeam(team.id) if team.state is T.PAUSED else ReleaseTeam(team.id)]
    effects.extend(
        WithdrawMember(team.id, member_id)
        for member_id in team.member_order
        if team.members[member_id].state is MembershipState.REMOVED
    )
    effects.extend(
        WithdrawNotice(team.id, notice_id(team.id, exchange_id, NoticeKind.QUESTION))
        for exchange_id in team.exchange_order
        if team.exchanges[exchange_id].state is not Q.OPEN
    )
    return tuple(effects)


# --- idempotent repeats -------------------------------------------------------------------------------------


def _repeat(team: Team, command: TeamCommand, actor: Membership | None) -> object | Rejected | None:
    """The existing record when `command` repeats an accepted operation, a conflict, or None to go on."""
    if isinstance(command, Ask):
        existing = team.exchanges.get(command.id)
        if existing is None:
            return None
        return (
            existing
            if _same_ask(team, existing, command, actor)
            else reject(E.CONFLICT, f"operation id {command.id!r} was already used for a different question")
        )
    if isinstance(command, AddMember):
        member = team.members.get(command.member.id)
        if member is None:
            return None
        return (
            member
            if _same_member(member, command.member)
            else reject(
                E.CONFLICT, f"operation id {command.member.id!r} was already used for a different member"
            )
        )
    if isinstance(command, Reply):
        exchange = team.exchanges.get(command.question_id)
        if exchange is None or exchange.answer is None:
            return None
        answer = exchange.answer
        author = actor.id if actor is not None else USER
        by_addressee = (actor.id if actor is not None else command.member_id) == exchange.to
        same = (answer.author, answer.text, answer.evidence) == (author, command.text, command.evidence)
        return exchange if same and by_addressee else None
    return None


def _same_ask(team: Team, existing: Exchange, command: Ask, actor: Membership | None) -> bool:
    sender = actor.id if actor is not None else command.from_
    return (
        sender is not None
        and _names(team, sender, existing.from_)
        and _names(team, command.to, existing.to)
        and existing.text == command.text
        and existing.context == command.context
        and existing.parent_id == command.parent_id
        and existing.notify == command.notify
        and existing.by_user == (actor is None)
        and (command.ttl_ms is None or command.ttl_ms == existing.ttl_ms)
    )


def _names(team: Team, ref: str, membership_id: str) -> bool:
    return ref == membership_id or team.members[membership_id].name == ref


def _same_member(member: Membership, new: NewMember) -> bool:
    return (member.machine_id, member.agent_id, member.name, member.role) == (
        new.machine_id,
        new.agent_id,
        new.name,
        new.role,
    )


# --- validation helpers -------------------------------------------------------------------------------------


def _check_id(value: str, what: str, limits: Limits) -> Rejected | None:
    if len(value) > limits.id_chars:
        return reject(E.BOUND_EXCEEDED, f"{what} is longer than {limits.id_chars} characters", "id_chars")
    if not ID_PATTERN.fullmatch(value):
        return reject(E.BAD_REQUEST, f"{what} {value!r} must be letters, digits, '.', '_', ':' or '-'")
    return None


def _check_text(value: str, what: str, limit: int, bound: str) -> Rejected | None:
    if not value.strip():
        return reject(E.BAD_REQUEST, f"{what} is empty")
    if len(value) > limit:
        return reject(E.BOUND_EXCEEDED, f"{what} has {len(value)} characters; at most {limit}", bound)
    return None


def _check_reason(value: str) -> Rejected | None:
    if REASON_PATTERN.fullmatch(value):
        return None
    return reject(E.BAD_REQUEST, "a reason is 1 to 32 of the letters a-z and '_' (like no_answer)")


def _first(*checks: Rejected | None) -> Rejected | None:
    return next((check for check in checks if check is not None), None)


# --- teams and memberships ----------------------------------------------------------------------------------


def _create_team(ledger: Ledger, command: CreateTeam, limits: Limits) -> Accepted[Ledger] | Rejected:
    existing = ledger.teams.get(command.team_id)
    if existing is not None:
        same = (
            existing.name == command.name
            and len(existing.member_order) >= len(command.members)
            and all(
                new.id in existing.members and _same_member(existing.members[new.id], new)
                for new in command.members
            )
        )
        if same:
            return unchanged(ledger, existing)
        return reject(E.CONFLICT, f"team id {command.team_id!r} is already used by a different team")
    problem = _first(
        _check_id(command.team_id, "team id", limits),
        _check_text(command.name, "team name", limits.name_chars, "name_chars"),
    )
    if problem:
        return problem
    if len(ledger.teams) >= limits.teams:
        return reject(E.BOUND_EXCEEDED, f"the owner already retains {limits.teams} teams", "teams")
    if len(command.members) > limits.memberships:
        return reject(
            E.BOUND_EXCEEDED, f"a team holds at most {limits.memberships} memberships", "memberships"
        )
    team = Team(
        id=command.team_id,
        name=command.name,
        state=T.ACTIVE,
        revision=0,
        created_at=command.at,
        members=Map(),
        member_order=(),
        keys=Map(),
        exchanges=Map(),
        exchange_order=(),
        pending_by_sender=Map(),
        open_deadlines=(),
        recent_asks=(),
    )
    effects: list[object] = []
    for new in command.members:
        added = _admit_member(team, new, command.at, limits)
        if isinstance(added, Rejected):
            return added
        team, effect = added
        effects.append(effect)
    return _commit(ledger, team, Accepted(team, team, effects=tuple(effects)))


def _admit_member(
    team: Team, new: NewMember, at: int, limits: Limits
) -> tuple[Team, SubmitNotice] | Rejected:
    problem = _first(
        _check_id(new.id, "membership id", limits),
        _check_text(new.machine_id, "machineId", limits.id_chars, "id_chars"),
        _check_text(new.agent_id, "agentId", limits.id_chars, "id_chars"),
        _check_text(new.name, "member name", limits.name_chars, "name_chars"),
        _check_text(new.key, "member key", limits.id_chars, "id_chars"),
    )
    if problem:
        return problem
    if len(new.role) > limits.name_chars:
        return reject(E.BOUND_EXCEEDED, f"role is longer than {limits.name_chars} characters", "name_chars")
    if new.id in team.members:
        return reject(E.CONFLICT, f"membership id {new.id!r} is used twice")
    if len(team.member_order) >= limits.memberships:
        return reject(
            E.BOUND_EXCEEDED,
            f"team {team.id!r} already retains {limits.memberships} memberships (removed ones count)",
            "memberships",
        )
    if new.key in team.keys:
        return reject(E.BAD_REQUEST, "member key is already in use; draw a new one")
    for member_id in team.member_order:
        other = team.members[member_id]
        if other.state is not MembershipState.ACTIVE:
            continue
        if new.name in (other.name, member_id):
            return reject(E.BAD_REQUEST, f"name {new.name!r} is already used by active member {other.id!r}")
        if (other.machine_id, other.agent_id) == (new.machine_id, new.agent_id):
            return reject(
                E.BAD_REQUEST, f"agent {new.machine_id}/{new.agent_id} is already active member {other.id!r}"
            )
    member = Membership(new.id, new.machine_id, new.agent_id, new.name, new.role, MembershipState.ACTIVE, at)
    team = replace(
        team,
        members=team.members.set(member.id, member),
        member_order=(*team.member_order, member.id),
        keys=team.keys.set(new.key, member.id),
    )
    return team, introduction_notice(team, member, limits)


def _add_member(team: Team, command: AddMember, actor: Membership | None, limits: Limits) -> TeamOutcome:
    added = _admit_member(team, command.member, command.at, limits)
    if isinstance(added, Rejected):
        return added
    team, intro = added
    return Accepted(team, team.members[command.member.id], effects=(intro,))


def _remove_member(
    team: Team, command: RemoveMember, actor: Membership | None, limits: Limits
) -> TeamOutcome:
    member = team.members.get(command.membership_id)
    if member is None:
        return reject(E.NOT_FOUND, f"no membership {command.membership_id!r} in team {team.id!r}")
    if member.state is MembershipState.REMOVED:
        return unchanged(team, member)
    removed = replace(member, state=MembershipState.REMOVED, removed_at=command.at)
    keys = team.keys
    for key, member_id in team.keys.items():
        if member_id == member.id:
            keys = keys.delete(key)
    team = replace(team, members=team.members.set(member.id, removed), keys=keys)
    return Accepted(team, removed, effects=(WithdrawMember(team.id, member.id),))


def _lifecycle(team: Team, command: TeamCommand, actor: Membership | None, limits: Limits) -> TeamOutcome:
    name = COMMAND_NAMES[type(command)]
    target = TEAM_GATE[(team.state, name)]
    assert isinstance(target, TeamState)
    if target is team.state:
        return unchanged(team, team)
    effects: tuple[object, ...]
    events: tuple[object, ...] = ()
    if target is T.PAUSED:
        effects = (HoldTeam(team.id),)
    elif target is T.ACTIVE:
        effects = (ReleaseTeam(team.id),)
    else:
        team, events = _end_open_questions(team, QuestionEvent.ARCHIVE, command.at)
        effects = (WithdrawTeam(team.id),)
    team = replace(team, state=target)
    return Accepted(team, team, events, effects)


def _end_open_questions(team: Team, event: QuestionEvent, at: int) -> tuple[Team, tuple[object, ...]]:
    events = []
    for _deadline, exchange_id in team.open_deadlines:
        team, _ = _end_question(team, team.exchanges[exchange_id], event, at)
        events.append(QuestionEnded(team.id, exchange_id, team.exchanges[exchange_id].state))
    return team, tuple(events)


# --- questions ----------------------------------------------------------------------------------------------


def _ask(team: Team, command: Ask, actor: Membership | None, limits: Limits) -> TeamOutcome:
    viewer = actor
    if actor is not None and command.from_ is not None and command.from_ != actor.id:
        return reject(E.UNAUTHORIZED, "only the owner can ask on another member's behalf (--from)")
    if actor is None:
        if command.from_ is None:
            return reject(E.BAD_REQUEST, "an owner ask must name the member it asks for (from)")
        actor = resolve_member(team, command.from_)
        if actor is None:
            return reject(E.NOT_FOUND, f"no active member {command.from_!r} to ask from")
        by_user = True
    else:
        by_user = False
    ttl = limits.ttl_default_ms if command.ttl_ms is None else command.ttl_ms
    problem = _first(
        _check_id(command.id, "question id", limits),
        _check_text(command.text, "question text", limits.question_chars, "question_chars"),
        None
        if command.context is None or len(command.context) <= limits.context_chars
        else reject(
            E.BOUND_EXCEEDED, f"context is longer than {limits.context_chars} characters", "context_chars"
        ),
        None
        if limits.ttl_min_ms <= ttl <= limits.ttl_max_ms
        else reject(
            E.BOUND_EXCEEDED,
            f"ttl must be {limits.ttl_min_ms} ms to {limits.ttl_max_ms} ms, not {ttl}",
            "ttl",
        ),
    )
    if problem:
        return problem
    recipient = resolve_member(team, command.to)
    if recipient is None:
        return reject(E.NOT_FOUND, f"no active member {command.to!r} in team {team.id!r}")
    if recipient.id == actor.id:
        return reject(E.BAD_REQUEST, "a member cannot ask itself")
    depth = 1
    if command.parent_id is not None:
        parent = visible_exchange(team, viewer, command.parent_id)
        if isinstance(parent, Rejected):
            return parent
        if actor.id not in (parent.from_, parent.to):  # the owner, asking for a member the parent left out
            return reject(E.BAD_REQUEST, f"parent {parent.id!r} does not involve {actor.name!r}")
        depth = parent.depth + 1
        if depth > limits.parent_chain:
            return reject(
                E.BOUND_EXCEEDED,
                f"a parent chain holds at most {limits.parent_chain} questions",
                "parent_chain",
            )
    if len(team.exchange_order) >= limits.exchanges:
        return reject(
            E.BOUND_EXCEEDED, f"team {team.id!r} already retains {limits.exchanges} exchanges", "exchanges"
        )
    pending = team.pending_by_sender.get(actor.id, 0)
    if pending >= limits.pending_per_sender:
        return reject(
            E.BOUND_EXCEEDED,
            f"{actor.name!r} already has {pending} open questions; wait for answers or cancel one",
            "pending_per_sender",
        )
    window_start = command.at - MINUTE_MS
    recent = team.recent_asks
    if recent and min(recent) <= window_start:  # an ask left the window (a host's times need not rise)
        recent = tuple(t for t in recent if t > window_start)
    if len(recent) >= limits.asks_per_minute:
        return reject(
            E.RATE_LIMITED, f"team {team.id!r} took {limits.asks_per_minute} questions in the last minute"
        )
    deadline = command.at + ttl
    exchange = Exchange(
        id=command.id,
        from_=actor.id,
        to=recipient.id,
        text=command.text,
        context=command.context,
        parent_id=command.parent_id,
        depth=depth,
        ttl_ms=ttl,
        notify=command.notify,
        by_user=by_user,
        created_at=command.at,
        deadline_at=deadline,
        state=Q.OPEN,
        delivery=owed_view(team, command.at),
    )
    deadlines = list(team.open_deadlines)
    bisect.insort(deadlines, (deadline, exchange.id))
    team = replace(
        team,
        exchanges=team.exchanges.set(exchange.id, exchange),
        exchange_order=(*team.exchange_order, exchange.id),
        pending_by_sender=team.pending_by_sender.set(actor.id, pending + 1),
        open_deadlines=tuple(deadlines),
        recent_asks=(*recent, command.at),
    )
    return Accepted(team, exchange, effects=(question_notice(team, exchange),))


def _end_question(
    team: Team, exchange: Exchange, event: QuestionEvent, at: int, reason: str | None = None
) -> tuple[Team, Exchange]:
    """Move an open question to its end state, with the reason its ender gave, and drop it from the open
    indexes."""
    target = QUESTION_TRANSITIONS[(exchange.state, event)]
    assert isinstance(target, QuestionState) and exchange.state is Q.OPEN
    ended = replace(exchange, state=target, ended_at=at, reason=reason)
    deadlines = list(team.open_deadlines)
    deadlines.remove((exchange.deadline_at, exchange.id))
    pending = team.pending_by_sender[exchange.from_] - 1
    team = replace(
        team,
        exchanges=team.exchanges.set(exchange.id, ended),
        open_deadlines=tuple(deadlines),
        pending_by_sender=(
            team.pending_by_sender.set(exchange.from_, pending)
            if pending
            else team.pending_by_sender.delete(exchange.from_)
        ),
    )
    return team, ended


def _reply(team: Team, command: Reply, actor: Membership | None, limits: Limits) -> TeamOutcome:
    exchange = visible_exchange(team, actor, command.question_id)
    if isinstance(exchange, Rejected):
        return exchange
    if actor is None:
        if command.member_id is None:
            return reject(E.BAD_REQUEST, "an owner reply must name the addressed member (memberId)")
        if command.member_id != exchange.to:
            return reject(E.WRONG_MEMBER, f"question {exchange.id!r} is addressed to {exchange.to!r}")
        author = USER
    else:
        if command.member_id is not None and command.member_id != actor.id:
            return reject(E.UNAUTHORIZED, "only the owner can reply on another member's behalf")
        if actor.id != exchange.to:
            return reject(
                E.WRONG_MEMBER, f"question {exchange.id!r} is addressed to {exchange.to!r}, not {actor.id!r}"
            )
        author = actor.id
    problem = _first(
        _check_text(command.text, "answer text", limits.answer_chars, "answer_chars"),
        None
        if len(command.evidence) <= limits.evidence_refs
        else reject(E.BOUND_EXCEEDED, f"at most {limits.evidence_refs} evidence references", "evidence_refs"),
        next(
            (
                reject(
                    E.BOUND_EXCEEDED,
                    f"an evidence reference is longer than {limits.evidence_ref_chars} characters",
                    "evidence_ref_chars",
                )
                for ref in command.evidence
                if len(ref) > limits.evidence_ref_chars or not ref.strip()
            ),
            None,
        ),
    )
    if problem:
        return problem
    if exchange.answer is not None:  # an identical repeat was already answered by _repeat
        return reject(E.CONFLICT, f"question {exchange.id!r} already has a different answer")
    target = QUESTION_TRANSITIONS[(exchange.state, QuestionEvent.REPLY)]
    assert isinstance(target, QuestionState)  # the one refusing cell, answered, was refused just above
    late = exchange.state is not Q.OPEN
    answer = Answer(author, exchange.to, command.at, command.text, command.evidence, late)
    if late:
        kept = replace(exchange, answer=answer)
        team = replace(team, exchanges=team.exchanges.set(kept.id, kept))
        return Accepted(team, kept, events=(LateAnswerKept(team.id, kept.id),))
    team, ended = _end_question(team, exchange, QuestionEvent.REPLY, command.at)
    ended = replace(ended, answer=answer)
    team = replace(team, exchanges=team.exchanges.set(ended.id, ended))
    effects: list[object] = [WithdrawNotice(team.id, notice_id(team.id, ended.id, NoticeKind.QUESTION))]
    if _resumes_asker(team, ended):
        effects.append(answer_notice(team, ended, limits))
        ended = replace(ended, answer_delivery=owed_view(team, command.at))
        team = replace(team, exchanges=team.exchanges.set(ended.id, ended))
    return Accepted(team, ended, (QuestionEnded(team.id, ended.id, ended.state),), tuple(effects))


def _cancel(team: Team, command: Cancel, actor: Membership | None, limits: Limits) -> TeamOutcome:
    problem = None if command.reason is None else _check_reason(command.reason)
    if problem:
        return problem
    exchange = visible_exchange(team, actor, command.question_id)
    if isinstance(exchange, Rejected):
        return exchange
    if actor is not None and actor.id != exchange.from_:
        return reject(
            E.WRONG_MEMBER, f"only the asker {exchange.from_!r} or the owner can cancel {exchange.id!r}"
        )
    return _end_one(team, exchange, QuestionEvent.CANCEL, command.at, command.reason)


def _expire(team: Team, command: Expire, actor: Membership | None, limits: Limits) -> TeamOutcome:
    """The owner's expiry, before the deadline: what a tick does to one question, with a reason."""
    problem = _check_reason(command.reason)
    if problem:
        return problem
    exchange = visible_exchange(team, actor, command.question_id)
    if isinstance(exchange, Rejected):
        return exchange
    return _end_one(team, exchange, QuestionEvent.EXPIRE, command.at, command.reason)


def _end_one(
    team: Team, exchange: Exchange, event: QuestionEvent, at: int, reason: str | None
) -> TeamOutcome:
    """End one question by `event` when it is open; an ended one stays as it ended, reason included."""
    target = QUESTION_TRANSITIONS[(exchange.state, event)]
    if isinstance(target, ErrorCode):
        return reject(target, f"question {exchange.id!r} is already {exchange.state}; nothing to {event}")
    if exchange.state is not Q.OPEN:
        return unchanged(team, exchange)
    team, ended = _end_question(team, exchange, event, at, reason)
    return Accepted(
        team,
        ended,
        (QuestionEnded(team.id, ended.id, ended.state),),
        (WithdrawNotice(team.id, notice_id(team.id, ended.id, NoticeKind.QUESTION)),),
    )


def _tick(team: Team, command: Tick, actor: Membership | None, limits: Limits) -> TeamOutcome:
    due = [exchange_id for deadline, exchange_id in team.open_deadlines if deadline <= command.at]
    if not due:
        return unchanged(team)
    events: list[object] = []
    effects: list[object] = []
    for exchange_id in due:
        team, ended = _end_question(team, team.exchanges[exchange_id], QuestionEvent.EXPIRE, command.at)
        events.append(QuestionEnded(team.id, ended.id, ended.state))
        effects.append(WithdrawNotice(team.id, notice_id(team.id, ended.id, NoticeKind.QUESTION)))
    return Accepted(team, None, tuple(events), tuple(effects))


def _record_delivery(
    team: Team, command: RecordDelivery, actor: Membership | None, limits: Limits
) -> TeamOutcome:
    parsed = parse_notice_id(command.notice_id)
    if parsed is None or parsed[0] != team.id:
        return reject(E.NOT_FOUND, f"no notice {command.notice_id!r} in team {team.id!r}")
    _team_id, subject_id, kind = parsed
    view = DeliveryView(command.state, command.reason, command.at)
    if kind is NoticeKind.INTRODUCTION:
        introduced = introduction_subject(subject_id)
        member = None if introduced is None else team.members.get(introduced[0])
        if introduced is None or member is None:
            return reject(E.NOT_FOUND, f"no membership {subject_id!r}")
        introduction_of = introduced[1]
        if member.introduction is not None and (
            _earlier(introduction_of, member.introduction_of)
            or (introduction_of == member.introduction_of and _same_view(member.introduction, view))
        ):
            return unchanged(team, member)
        member = replace(member, introduction=view, introduction_of=introduction_of)
        return Accepted(replace(team, members=team.members.set(member.id, member)), member)
    exchange = team.exchanges.get(subject_id)
    if exchange is None:
        return reject(E.NOT_FOUND, f"no exchange {subject_id!r}")
    current = exchange.delivery if kind is NoticeKind.QUESTION else exchange.answer_delivery
    if current is not None and _same_view(current, view):
        return unchanged(team, exchange)
    if kind is NoticeKind.QUESTION:
        exchange = replace(exchange, delivery=view)
    else:
        exchange = replace(exchange, answer_delivery=view)
    return Accepted(replace(team, exchanges=team.exchanges.set(exchange.id, exchange)), exchange)


def _same_view(a: DeliveryView, b: DeliveryView) -> bool:
    return (a.state, a.reason) == (b.state, b.reason)


def _earlier(introduction: int | None, shown: int | None) -> bool:
    """Whether a report's introduction came before the one the member's view describes (None, the first,
    before every re-introduction). A re-introduced member has several introductions and a desk reports each
    again after every restart, an old one perhaps as refused (`rejected`, `expired`) when the desk no longer
    holds it: what became of an earlier introduction never hides what became of a later one."""
    return shown is not None and (introduction is None or introduction < shown)


Handler = Callable[[Team, TeamCommand, Membership | None, Limits], TeamOutcome]

_HANDLERS: dict[type[TeamCommand], Handler] = {
    PauseTeam: _lifecycle,
    ResumeTeam: _lifecycle,
    ArchiveTeam: _lifecycle,
    AddMember: _add_member,  # type: ignore[dict-item]
    RemoveMember: _remove_member,  # type: ignore[dict-item]
    Ask: _ask,  # type: ignore[dict-item]
    Reply: _reply,  # type: ignore[dict-item]
    Cancel: _cancel,  # type: ignore[dict-item]
    Expire: _expire,  # type: ignore[dict-item]
    Tick: _tick,  # type: ignore[dict-item]
    RecordDelivery: _record_delivery,  # type: ignore[dict-item]
}
