# Reads of the team ledger: what a member or the owner may see, and the pure decision behind `wait`. Reads
# never change the ledger; the delivery side effects of reading (suppressing an unsent notice) are the
# delivery desk's commands, sent by the shell after a read.
from __future__ import annotations

import enum

import attrs

from .delivery import DeliveryState, Reason
from .effects import parse_notice_id
from .errors import Rejected
from .limits import DEFAULT_LIMITS, Limits
from .records import DeliveryView, Exchange, Membership, NoticeKind, QuestionState, Team
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


# visible_exchange is the reducer's own read rule (core/team.py), offered here with the other reads.
__all__ = [
    "Inbox",
    "WaitDecision",
    "WaitReason",
    "decide_wait",
    "delivery_view",
    "inbox",
    "incoming_for",
    "reader",
    "status",
    "visible_exchange",
    "waiter_for",
    "was_read",
]
