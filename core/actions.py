# The one table of the daemon's `team` actions. Each row says who may send the action, whether it names a
# team, the fields its frame may carry and, for an action that is one ledger command, how each field fills
# the command, what the answer shows and how a person types it. The RPC's field check (io/rpc.py), the
# ledger's owner-only rule (core/team.py), the daemon's handler of a command action (io/team_actions.py) and
# the CLI's Typer and fast parsers of a typed one (cli/commands.py) are all read from here, so a new team
# command is its core command, its spec rows and one row here.
# Standard library only, and no import of the reducers: the CLI reads this table on every call.
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Final


class Kind(enum.StrEnum):
    """What a field's value is on the wire."""

    TEXT = "text"
    INT = "int"
    BOOL = "bool"
    TEXT_LIST = "text_list"  # a list of strings; absent is empty
    ANY = "any"  # read by a hand-written handler, which checks it


class Refers(enum.StrEnum):
    """What a text field names, where that changes how it is read (the value is the contract's words)."""

    OPERATION = "the operation id"  # the daemon draws one when it is absent
    MEMBER = "a member's name or id"  # a membership id, or an active member's name, which the daemon resolves
    QUESTION = "a question id"  # which the CLI also takes as a unique prefix


class Answer(enum.StrEnum):
    """What a command action answers with: the view of the record the command returned."""

    TEAM = "team"
    EXCHANGE = "exchange"
    MEMBER = "member"  # a changed membership: the board's members follow the team's


@dataclass(frozen=True, slots=True)
class Field:
    wire: str  # its name in the frame
    kind: Kind = Kind.ANY
    required: bool = False
    attribute: str = ""  # the ledger command's attribute it fills (a command action's fields only)
    refers: Refers | None = None
    cli: str | None = None  # on a typed command: an argument's name, or an option's --flag
    help: str = ""  # the CLI's help of that argument or option


@dataclass(frozen=True, slots=True)
class TeamAction:
    name: str
    fields: tuple[Field, ...] = ()
    needs_team: bool = True
    owner_only: bool = False
    # The action is the ledger command of this name (core.commands.COMMAND_NAMES). With an `answer`, the
    # daemon builds it from `fields` and answers its result's view, with no hand-written handler.
    command: bool = False
    answer: Answer | None = None
    # A typed command: `harness team NAME` is generated from this row (its arguments and options are the
    # fields' `cli`); the first line is its summary.
    help: str | None = None
    # The wire names of `fields`, which the RPC checks every frame against: derived once, not per frame.
    field_names: frozenset[str] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "field_names", frozenset(field.wire for field in self.fields))


def _given(*wires: str) -> tuple[Field, ...]:
    """Fields a hand-written handler reads and checks itself."""
    return tuple(Field(wire) for wire in wires)


REASON_HELP: Final = "Why, as the question will show it: 1 to 32 of a-z and '_', like no_answer."
_QUESTION: Final = Field(
    "questionId",
    Kind.TEXT,
    required=True,
    attribute="question_id",
    refers=Refers.QUESTION,
    cli="question_id",
    help="Question id (or a unique prefix).",
)


def _reason(*, required: bool) -> Field:
    return Field("reason", Kind.TEXT, required, "reason", cli="--reason", help=REASON_HELP)


def _lifecycle(name: str, help: str) -> TeamAction:
    return TeamAction(name, owner_only=True, command=True, answer=Answer.TEAM, help=help)


_ROWS: Final = (
    TeamAction("capabilities", needs_team=False),
    TeamAction("create", _given("id", "name", "members"), needs_team=False, owner_only=True, command=True),
    TeamAction("list", needs_team=False, owner_only=True),
    TeamAction("get", owner_only=True),
    TeamAction("members"),
    TeamAction("add", _given("id", "machineId", "agentId", "name", "role"), owner_only=True, command=True),
    TeamAction(
        "remove",
        (
            Field(
                "memberId",
                Kind.TEXT,
                required=True,
                attribute="membership_id",
                refers=Refers.MEMBER,
                cli="membership_id",
                help="Membership id (or a unique prefix).",
            ),
        ),
        owner_only=True,
        command=True,
        answer=Answer.MEMBER,
        help="Remove a member; its key stops working, its exchanges stay attributable.",
    ),
    TeamAction("key", _given("memberId"), owner_only=True),
    _lifecycle("pause", "Hold new questions and unsent notices."),
    _lifecycle("resume", "Release held work."),
    _lifecycle("archive", "Keep the record, cancel pending work."),
    TeamAction(
        "ask",
        (
            Field("id", Kind.TEXT, attribute="id", refers=Refers.OPERATION),
            Field("to", Kind.TEXT, required=True, attribute="to"),
            Field("text", Kind.TEXT, required=True, attribute="text"),
            Field("context", Kind.TEXT, attribute="context"),
            Field("ttlMs", Kind.INT, attribute="ttl_ms"),
            Field("parentId", Kind.TEXT, attribute="parent_id"),
            Field("notify", Kind.BOOL, attribute="notify"),
            Field("from", Kind.TEXT, attribute="from_"),
        ),
        command=True,
        answer=Answer.EXCHANGE,
    ),
    TeamAction(
        "reply",
        (
            Field("questionId", Kind.TEXT, required=True, attribute="question_id", refers=Refers.QUESTION),
            Field("text", Kind.TEXT, required=True, attribute="text"),
            Field("evidence", Kind.TEXT_LIST, attribute="evidence"),
            Field("memberId", Kind.TEXT, attribute="member_id", refers=Refers.MEMBER),
        ),
        command=True,
        answer=Answer.EXCHANGE,
    ),
    TeamAction("inbox"),
    TeamAction("status", _given("questionId")),
    TeamAction("wait", _given("questionId", "seconds")),
    TeamAction(
        "cancel",
        (_QUESTION, _reason(required=False)),
        command=True,
        answer=Answer.EXCHANGE,
        help="Cancel your open question (withdraws its unsent notice; never interrupts the peer).",
    ),
    TeamAction(
        "expire",
        (_QUESTION, _reason(required=True)),
        owner_only=True,
        command=True,
        answer=Answer.EXCHANGE,
        help="Owner: end an open question `expired` now, saying why (withdraws its unsent notice; never an "
        "answer, so a reply after it is late).",
    ),
    TeamAction("delivery_check", _given("questionId", "notice"), owner_only=True),
    TeamAction("delivery_inspect", _given("noticeId"), owner_only=True),
    TeamAction("delivery_resolve", _given("noticeId", "landed"), owner_only=True),
    TeamAction("usage"),
    TeamAction("subscribe", _given("deltas"), owner_only=True),
    TeamAction("board_get"),
    TeamAction("board", _given("id", "generation", "command")),
    TeamAction(
        "agent_register",
        _given("agentId", "name", "engine", "tmux", "cwd", "startedBy", "inboxOnly"),
        needs_team=False,
        owner_only=True,
    ),
    TeamAction("agent_list", needs_team=False, owner_only=True),
    TeamAction("agent_show", _given("agentId"), needs_team=False, owner_only=True),
    TeamAction("agent_remove", _given("agentId"), needs_team=False, owner_only=True),
    TeamAction("daemon_status", needs_team=False, owner_only=True),
)

TEAM_ACTIONS: Final[dict[str, TeamAction]] = {action.name: action for action in _ROWS}
# The ledger commands a team's owner sends as themselves (through an action of the same name) or that the
# daemon sends for the owner (the timer's tick, a destination's delivery report): never a member.
OWNER_COMMANDS: Final = frozenset(
    {action.name for action in _ROWS if action.command and action.owner_only} | {"tick", "record_delivery"}
)
