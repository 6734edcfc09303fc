# What the team reducer asks of the shell, and what it reports happened. Effects run only after the command
# that produced them is durable; the shell answers back with commands (RecordDelivery, Tick), never by
# reaching into the state.
from __future__ import annotations

import attrs

from .records import NoticeKind, QuestionState


def notice_id(team_id: str, subject_id: str, kind: NoticeKind) -> str:
    """Notice ids are derived, never drawn, so a resubmitted notice is recognised by every destination."""
    return f"{team_id}/{subject_id}/{kind}"


def parse_notice_id(value: str) -> tuple[str, str, NoticeKind] | None:
    parts = value.split("/")
    if len(parts) != 3 or parts[2] not in NoticeKind.__members__.values():
        return None
    return parts[0], parts[1], NoticeKind(parts[2])


@attrs.frozen
class SubmitNotice:
    """Owe `membership_id`'s terminal a notice; the shell renders its text and hands it to the destination."""

    team_id: str
    notice_id: str
    kind: NoticeKind
    subject_id: str  # the exchange (question, answer) or membership (introduction) it is about
    membership_id: str
    machine_id: str
    agent_id: str
    expires_at: int


@attrs.frozen
class WithdrawNotice:
    """Stop a notice that has not been written; one already written stays as it is."""

    team_id: str
    notice_id: str


@attrs.frozen
class HoldTeam:
    team_id: str


@attrs.frozen
class ReleaseTeam:
    team_id: str


@attrs.frozen
class WithdrawTeam:
    """Archive: every unsent notice of the team is withdrawn for good."""

    team_id: str


@attrs.frozen
class WithdrawMember:
    """Removal: every unsent notice to this membership is withdrawn."""

    team_id: str
    membership_id: str


@attrs.frozen
class ArmTimer:
    """Send `Tick(at)` for this team when the clock reaches `at` (the earliest open deadline)."""

    team_id: str
    at: int


@attrs.frozen
class TeamChanged:
    team_id: str
    revision: int


@attrs.frozen
class QuestionEnded:
    team_id: str
    exchange_id: str
    state: QuestionState


@attrs.frozen
class LateAnswerKept:
    team_id: str
    exchange_id: str
