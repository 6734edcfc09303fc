# Commands of the owner's team ledger: everything the reducer may be asked to do, with time (`at`, in
# milliseconds), generated ids and member keys supplied by the shell. The journal stores exactly these, so
# replaying them through `step` rebuilds the ledger.
from __future__ import annotations

import attrs


@attrs.frozen
class NewMember:
    id: str  # membership id; the add's operation id, so a retried add is recognised
    machine_id: str
    agent_id: str
    name: str
    role: str
    key: str  # the private member key, drawn by the shell; never part of a snapshot


@attrs.frozen
class CreateTeam:
    at: int
    team_id: str
    name: str
    members: tuple[NewMember, ...] = ()
    member_key: str | None = None  # always None: creating a team is an owner operation


@attrs.frozen
class PauseTeam:
    at: int
    team_id: str
    member_key: str | None = None


@attrs.frozen
class ResumeTeam:
    at: int
    team_id: str
    member_key: str | None = None


@attrs.frozen
class ArchiveTeam:
    at: int
    team_id: str
    member_key: str | None = None


@attrs.frozen
class AddMember:
    at: int
    team_id: str
    member: NewMember
    member_key: str | None = None


@attrs.frozen
class RemoveMember:
    at: int
    team_id: str
    membership_id: str
    member_key: str | None = None


@attrs.frozen
class Ask:
    at: int
    team_id: str
    id: str  # operation id, becomes the question id
    to: str  # membership id or active member name
    text: str
    context: str | None = None
    ttl_ms: int | None = None
    parent_id: str | None = None
    notify: bool = True
    from_: str | None = None  # owner only: the member the owner asks for
    member_key: str | None = None


@attrs.frozen
class Reply:
    at: int
    team_id: str
    question_id: str
    text: str
    evidence: tuple[str, ...] = ()
    member_id: str | None = None  # owner only: the addressee the owner answers for
    member_key: str | None = None


@attrs.frozen
class Cancel:
    at: int
    team_id: str
    question_id: str
    member_key: str | None = None
    reason: str | None = None  # why, shown with the question (records.REASON_PATTERN)


@attrs.frozen
class Expire:
    """The owner ends an open question `expired` before its deadline, saying why (a session releases the
    asker of a question that got no answer: `no_answer`). Never an answer."""

    at: int
    team_id: str
    question_id: str
    reason: str
    member_key: str | None = None


@attrs.frozen
class Tick:
    """The clock passed `at`: expire what is due. Armed by the shell from `next_deadline`."""

    at: int
    team_id: str
    member_key: str | None = None


@attrs.frozen
class RecordDelivery:
    """The destination reported a notice's delivery state (team_delivery status), for the owner's view."""

    at: int
    team_id: str
    notice_id: str
    state: str
    reason: str | None = None
    member_key: str | None = None


TeamCommand = (
    CreateTeam
    | PauseTeam
    | ResumeTeam
    | ArchiveTeam
    | AddMember
    | RemoveMember
    | Ask
    | Reply
    | Cancel
    | Expire
    | Tick
    | RecordDelivery
)

TEAM_COMMANDS: tuple[type[TeamCommand], ...] = (
    CreateTeam,
    PauseTeam,
    ResumeTeam,
    ArchiveTeam,
    AddMember,
    RemoveMember,
    Ask,
    Reply,
    Cancel,
    Expire,
    Tick,
    RecordDelivery,
)

COMMAND_NAMES: dict[type[TeamCommand], str] = {
    CreateTeam: "create",
    PauseTeam: "pause",
    ResumeTeam: "resume",
    ArchiveTeam: "archive",
    AddMember: "add",
    RemoveMember: "remove",
    Ask: "ask",
    Reply: "reply",
    Cancel: "cancel",
    Expire: "expire",
    Tick: "tick",
    RecordDelivery: "record_delivery",
}
