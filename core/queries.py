# Reads of the team ledger: what a member or the owner may see, and the pure decision behind `wait`. Reads
# never change the ledger; the delivery side effects of reading (suppressing an unsent notice) are the
# delivery desk's commands, sent by the shell after a read.
from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from .delivery import DeliveryState, Desk, Reason, unsent_count
from .effects import parse_notice_id
from .errors import ErrorCode, Rejected
from .limits import DEFAULT_LIMITS, MINUTE_MS, Limits
from .outcome import reject
from .records import (
    DeliveryView,
    Exchange,
    Ledger,
    Membership,
    MembershipState,
    NoticeKind,
    QuestionState,
    Team,
)
from .team import actor_of, may_read, visible_exchange


@attrs.frozen
class Inbox:
    questions: tuple[Exchange, ...]  # open questions addressed to the member, oldest first
    answers: tuple[Exchange, ...]  # the most recent answers to the member's questions, newest first


class WaitReason(enum.StrEnum):
    ANSWERED = "answered"
    INCOMING = "incoming"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


@attrs.frozen
class WaitDecision:
    reason: WaitReason
    exchange: Exchange
    incoming: tuple[Exchange, ...]  # every open question addressed to the waiter
    news: tuple[str, ...] = ()  # the ids among them that break a wait (see decide_wait)


def reader(team: Team, member_key: str | None) -> Membership | Rejected | None:
    """Who is reading: a member (by its key) or the owner (None)."""
    return actor_of(team, member_key)


def inbox(team: Team, member: Membership, limits: Limits = DEFAULT_LIMITS) -> Inbox:
    questions = tuple(
        exchange
        for exchange_id in team.exchange_order
        if (exchange := team.exchanges[exchange_id]).to == member.id and exchange.state is QuestionState.OPEN
    )
    answered = [
        exchange
        for exchange_id in reversed(team.exchange_order)
        if (exchange := team.exchanges[exchange_id]).from_ == member.id and exchange.answer is not None
    ]
    answered.sort(key=lambda exchange: -exchange.answer.at if exchange.answer else 0)
    return Inbox(questions, tuple(answered[: limits.recent_answers]))


def status(team: Team, viewer: Membership | None) -> tuple[Exchange, ...]:
    """Every exchange the viewer may read, oldest first."""
    exchanges = (team.exchanges[exchange_id] for exchange_id in team.exchange_order)
    return tuple(exchange for exchange in exchanges if may_read(viewer, exchange))


def incoming_for(team: Team, member_id: str) -> tuple[Exchange, ...]:
    return tuple(
        exchange
        for _deadline, exchange_id in team.open_deadlines
        if (exchange := team.exchanges[exchange_id]).to == member_id
    )


def was_read(exchange: Exchange) -> bool:
    """Whether the addressee retrieved the question, as its desk last reported to the owner: the notice was
    read after it reached the terminal, or withdrawn unsent because the record was read (inbox, or an earlier
    wait's `incoming`)."""
    view = exchange.delivery
    return view is not None and (
        view.state == DeliveryState.READ.value
        or (view.state == DeliveryState.WITHDRAWN.value and view.reason == Reason.INBOX.value)
    )


def decide_wait(
    team: Team,
    waiter_id: str,
    exchange: Exchange,
    now: int,
    until: int,
    *,
    since: int = 0,
    seen: frozenset[str] = frozenset(),
) -> WaitDecision | None:
    """What a `wait` on `exchange` by `waiter_id`, begun at `since`, returns now, or None to keep waiting.

    An answer wins; then news breaks the wait so the waiter can answer (two members waiting on each other
    therefore both wake); then the question's own end; then the wait's own timeout, which never cancels
    anything. News is an open question addressed to the waiter that arrived since the wait began, or that it
    has not read: neither reported read by its desk (`was_read`) nor among `seen`, the ids the shell already
    showed the waiter. A question it read before waiting does not break the wait, so waiting again after
    reading blocks instead of returning at once, which would invite a polling loop. `since` 0 makes every
    open question news.
    """
    current = team.exchanges[exchange.id]
    incoming = incoming_for(team, waiter_id)
    news = tuple(
        question.id
        for question in incoming
        if question.created_at >= since or not (question.id in seen or was_read(question))
    )
    if current.state is QuestionState.ANSWERED:
        return WaitDecision(WaitReason.ANSWERED, current, incoming, news)
    if news:
        return WaitDecision(WaitReason.INCOMING, current, incoming, news)
    if current.state is QuestionState.CANCELLED:
        return WaitDecision(WaitReason.CANCELLED, current, incoming)
    if current.state is QuestionState.EXPIRED:
        return WaitDecision(WaitReason.EXPIRED, current, incoming)
    if now >= until:
        return WaitDecision(WaitReason.TIMEOUT, current, incoming)
    return None


def waiter_for(team: Team, viewer: Membership | None, exchange: Exchange) -> str:
    """Whose incoming questions break a wait: the waiting member's, or for the owner the asker's."""
    return viewer.id if viewer is not None else exchange.from_


def delivery_view(team: Team, notice_id: str) -> DeliveryView | None:
    """What the owner last recorded of a notice's delivery; None: nothing yet, or no such notice."""
    parsed = parse_notice_id(notice_id)
    if parsed is None or parsed[0] != team.id:
        return None
    _team_id, subject_id, kind = parsed
    if kind is NoticeKind.INTRODUCTION:
        member = team.members.get(subject_id)
        return None if member is None else member.introduction
    exchange = team.exchanges.get(subject_id)
    if exchange is None:
        return None
    return exchange.delivery if kind is NoticeKind.QUESTION else exchange.answer_delivery


# --- usage: every bound with what holds against it, so it is seen before it bites ---------------------------

# A bound warns from this share of its limit on: early enough for a person to act before work is refused.
WARN_PERCENT = 80

# What a person can do about each bound, by its Limits field name, in the order `usage` and `desk_usage`
# report them. Retained means retained (spec/team-v1.md section 5): ending, cancelling or archiving frees
# no slot of `teams`, `memberships` or `exchanges`, so the advice for those is a new team, not a cleanup.
ADVICE: Mapping[str, str] = {
    "teams": "archived teams count too: a new team needs a daemon with a larger teams bound "
    "(HARNESS_LIMITS) or another data directory (--home)",
    "memberships": "removed members count too: for more members, archive the team and create a new one",
    "exchanges": "answered, expired and cancelled questions count too: archive the team and create a new one",
    "pending_per_sender": "the member has that many open questions: wait for answers, or cancel one "
    "(`cancel QUESTION_ID`)",
    "asks_per_minute": "questions of the last minute count: wait a minute before asking more",
    "parent_chain": "the deepest follow-up chain is that long: ask a new question without --parent",
    "delivery_records": "every notice this machine's desk was given keeps its record here: when full, no "
    "new notice is accepted; `inbox` still shows each agent its questions",
    "queued_per_agent": "the agent's notices wait for an idle screen: let its turn end, clear its draft "
    "or answer its dialog (`delivery QUESTION_ID` says why one waits), or have the agent read them with "
    "`inbox` (its unsent ones are then withdrawn)",
}


@attrs.frozen
class BoundUse:
    """One bound (its Limits field name) and what holds against it now. A limit lowered below what is
    already held (HARNESS_LIMITS) shows a use above the limit: it applies to new work only."""

    bound: str
    use: int
    limit: int
    subject: str | None = None  # the membership (or question) at that use, for a bound per member or chain

    @property
    def ratio(self) -> float:
        return self.use / self.limit if self.limit > 0 else 1.0

    @property
    def warning(self) -> bool:
        return self.use * 100 >= self.limit * WARN_PERCENT

    @property
    def advice(self) -> str:
        return ADVICE[self.bound]


def _most(counts: list[tuple[int, str]]) -> tuple[int, str | None]:
    """The largest count and whose it is (the first of equals); 0 and None when nobody has any."""
    return max((count for count in counts if count[0] > 0), key=lambda count: count[0], default=(0, None))


def usage(
    ledger: Ledger, team_id: str, limits: Limits, now: int, viewer: Membership | None = None
) -> tuple[BoundUse, ...] | Rejected:
    """Each ledger bound of the team with its use at `now`. The owner (viewer None) sees every member's
    open questions and its own teams; a member sees only what it may read: its own open questions and the
    chains of its own exchanges, and no count of the owner's other teams."""
    team = ledger.teams.get(team_id)
    if team is None:
        return reject(ErrorCode.NOT_FOUND, f"no team {team_id!r}")
    senders = team.member_order if viewer is None else (viewer.id,)
    pending, sender = _most([(team.pending_by_sender.get(member, 0), member) for member in senders])
    chain, deepest = _most([(e.depth, e.id) for e in status(team, viewer)])
    recent = sum(1 for at in team.recent_asks if now - MINUTE_MS < at <= now)
    owner = (BoundUse("teams", len(ledger.teams), limits.teams),) if viewer is None else ()
    return (
        *owner,
        BoundUse("memberships", len(team.member_order), limits.memberships),
        BoundUse("exchanges", len(team.exchange_order), limits.exchanges),
        BoundUse("pending_per_sender", pending, limits.pending_per_sender, sender),
        BoundUse("asks_per_minute", recent, limits.asks_per_minute),
        BoundUse("parent_chain", chain, limits.parent_chain, deepest),
    )


def desk_usage(
    desk: Desk, team: Team, limits: Limits, viewer: Membership | None = None
) -> tuple[BoundUse, ...]:
    """The bounds of a destination's desk as they touch the team: the records it retains (for every team,
    which share them; not for a member viewer, to whom its rise would tell of other teams' questions) and the
    unsent notices of the busiest agent session of the team's active members on that machine (for a member
    viewer, its own)."""
    members = (team.members[member] for member in team.member_order) if viewer is None else (viewer,)
    local = [
        (unsent_count(session), member.id)
        for member in members
        if member.state is MembershipState.ACTIVE
        and member.machine_id == desk.machine_id
        and (session := desk.sessions.get(member.agent_id)) is not None
    ]
    queued, busiest = _most(local)
    own = BoundUse("queued_per_agent", queued, limits.queued_per_agent, busiest)
    if viewer is not None:
        return (own,)
    return (BoundUse("delivery_records", len(desk.notices), limits.delivery_records), own)


# visible_exchange is the reducer's own read rule (core/team.py), offered here with the other reads.
__all__ = [
    "ADVICE",
    "WARN_PERCENT",
    "BoundUse",
    "Inbox",
    "WaitDecision",
    "WaitReason",
    "decide_wait",
    "delivery_view",
    "desk_usage",
    "inbox",
    "incoming_for",
    "reader",
    "status",
    "usage",
    "visible_exchange",
    "waiter_for",
    "was_read",
]
