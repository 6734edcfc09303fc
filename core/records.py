# The records of the owner's team ledger. They are frozen, hashable values so a whole ledger can be a key in
# the model checker's visited set; collections are `immutables.Map` (structural sharing, cached hash) or
# tuples. Member keys live only in `Team.keys`, so no record that leaves the owner can carry one by accident.
from __future__ import annotations

import enum
import re
from typing import Final

import attrs
from immutables import Map

# The shape of every id the ledger accepts (teams, memberships, exchanges): letters, digits and `._:-`,
# starting with a letter or digit, so an id is also a safe file name (a member's key file is named by ids).
ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]*")
# Why a question ended, when whoever ended it said (`no_answer`, `concluded`): a short token, never free text,
# so a reason shown in a view or a trace can carry neither a secret nor a terminal control sequence.
REASON_PATTERN: Final = re.compile(r"[a-z_]{1,32}")


class TeamState(enum.StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    ARCHIVED = "archived"


class QuestionState(enum.StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class MembershipState(enum.StrEnum):
    ACTIVE = "active"
    REMOVED = "removed"


class NoticeKind(enum.StrEnum):
    INTRODUCTION = "introduction"
    QUESTION = "question"
    ANSWER = "answer"


USER = "user"
"""The author of an owner reply: the person, acting for the addressed member."""


@attrs.frozen
class DeliveryView:
    """What the owner last heard from the destination about one notice (delivery is an observation)."""

    state: str
    reason: str | None
    updated_at: int


@attrs.frozen
class Membership:
    id: str
    machine_id: str
    agent_id: str
    name: str
    role: str
    state: MembershipState
    joined_at: int
    removed_at: int | None = None
    introduction: DeliveryView | None = None
    # Which of the member's introductions `introduction` describes: None the first, else the time `AT` of the
    # re-introduction `MEMBERSHIP~AT`; a report of an earlier one never replaces it (spec/team-v1.md).
    introduction_of: int | None = None


@attrs.frozen
class Answer:
    author: str  # the answering membership id, or USER for an owner reply
    member_id: str  # the addressee the answer is for (always the exchange's `to`)
    at: int
    text: str
    evidence: tuple[str, ...]
    late: bool


@attrs.frozen(cache_hash=True)
class Exchange:
    id: str  # the ask's operation id
    from_: str  # membership id of the asker
    to: str  # membership id of the addressee
    text: str
    context: str | None
    parent_id: str | None
    depth: int  # questions in this exchange's parent chain, itself included
    ttl_ms: int
    notify: bool
    by_user: bool  # the owner asked on the member's behalf: the member is not resumed
    created_at: int
    deadline_at: int
    state: QuestionState
    answer: Answer | None = None
    ended_at: int | None = None
    delivery: DeliveryView | None = None
    answer_delivery: DeliveryView | None = None
    reason: str | None = None  # why it ended, when the cancel or expire that ended it said (REASON_PATTERN)


@attrs.frozen(cache_hash=True)
class Team:
    id: str
    name: str
    state: TeamState
    revision: int
    created_at: int
    members: Map[str, Membership]
    member_order: tuple[str, ...]
    keys: Map[str, str]  # private member key -> active membership id; removal revokes by deleting
    exchanges: Map[str, Exchange]
    exchange_order: tuple[str, ...]
    # Derived indexes, kept so a step at full bounds never scans the whole team; invariant T9 checks them.
    pending_by_sender: Map[str, int]
    open_deadlines: tuple[tuple[int, str], ...]  # (deadline_at, exchange id) of open exchanges, sorted
    recent_asks: tuple[int, ...]  # times of the asks inside the rate window, oldest first


@attrs.frozen(cache_hash=True)
class Ledger:
    """The owner's whole ledger: every team it retains."""

    teams: Map[str, Team] = attrs.field(factory=Map)


EMPTY_LEDGER = Ledger()
