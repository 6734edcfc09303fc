# The one translation between core values and the contract's camelCase JSON: commands for the journal and
# the wire, records for checkpoints, and the public snapshots that leave the owner. Structuring is strict:
# unknown keys, wrong types (a string for a number, a number for a bool) and missing fields are refused, so
# bad input becomes a `bad_request` at the edge instead of a surprise deep inside a reducer.
from __future__ import annotations

import enum
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Final, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.strategies import configure_tagged_union
from immutables import Map

from .board import BOARD_COMMAND_NAMES, Board, BoardCommand, Member, Note, Page, shares_of
from .commands import COMMAND_NAMES, TeamCommand
from .delivery import DeliveryState, Desk, DeskCommand, Notice, Reason
from .errors import ErrorCode, Rejected
from .fast_structure import Compiler, Unsure
from .outcome import reject
from .records import Exchange, Membership, NoticeKind, Team

T = TypeVar("T")


def camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part.capitalize() for part in rest)


def _structure_scalar(value: object, tp: type[Any]) -> object:
    """Strict scalars: no "5" for 5, no True for 1, no 1 for True. Enums come by their value."""
    if type(value) is tp:  # the common case first: a checkpoint holds a million of them
        return value
    if issubclass(tp, enum.Enum):
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise TypeError(f"expected one of {[member.value for member in tp]}")
        return tp(value)
    if tp is float and type(value) is int:
        return value
    raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")


def _is_map(tp: Any) -> bool:
    return typing.get_origin(tp) is Map or tp is Map


def _optional_of(tp: Any) -> Any:
    """X for `X | None` (any other type: None)."""
    args = typing.get_args(tp)
    is_union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    return (
        next((arg for arg in args if arg is not types.NoneType), None)
        if is_union and len(args) == 2 and types.NoneType in args
        else None
    )


def _is_frozenset(tp: Any) -> bool:
    return typing.get_origin(tp) is frozenset or tp is frozenset


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# Desk commands journal under their class names in snake case ("write_started"); renaming a desk command class
# therefore needs a journal migration, as renaming a team command's COMMAND_NAMES entry would.
DESK_COMMAND_NAMES: dict[type[Any], str] = {cls: _snake(cls.__name__) for cls in typing.get_args(DeskCommand)}


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    for kind in (str, int, bool, float):
        # singledispatch: these also catch StrEnum and IntEnum subclasses, which _structure_scalar handles
        converter.register_structure_hook(kind, _structure_scalar)
    converter.register_structure_hook(enum.Enum, _structure_scalar)
    converter.register_unstructure_hook(enum.Enum, lambda value: value.value)

    def tuple_factory(tp: Any) -> Callable[[Any, Any], tuple[Any, ...]]:
        (item,) = (arg for arg in typing.get_args(tp) if arg is not Ellipsis)
        hook = converter.get_structure_hook(item)  # once per type, not per value or element

        def structure_tuple(value: object, _: Any) -> tuple[Any, ...]:
            if not isinstance(value, list | tuple):
                raise TypeError("expected a list")
            return tuple(hook(element, item) for element in value)

        return structure_tuple

    def is_homogeneous_tuple(tp: Any) -> bool:
        return typing.get_origin(tp) is tuple and Ellipsis in typing.get_args(tp)

    converter.register_structure_hook_factory(is_homogeneous_tuple, tuple_factory)

    def map_factory(tp: Any) -> Callable[[Any, Any], Map[Any, Any]]:
        key_type, value_type = typing.get_args(tp) or (Any, Any)  # a bare Map, as a bare frozenset below
        key_hook = converter.get_structure_hook(key_type)  # once per type, as for tuples
        value_hook = converter.get_structure_hook(value_type)

        def structure_map(value: object, _: Any) -> Map[Any, Any]:
            if not isinstance(value, dict):
                raise TypeError("expected an object")
            return Map({key_hook(k, key_type): value_hook(v, value_type) for k, v in value.items()})

        return structure_map

    converter.register_structure_hook_factory(_is_map, map_factory)

    def optional_factory(tp: Any) -> Callable[[Any, Any], Any]:
        """cattrs looks the inner type's hook up on every optional value; this looks it up once."""
        inner = _optional_of(tp)
        hook = converter.get_structure_hook(inner)
        return lambda value, _: None if value is None else hook(value, inner)

    converter.register_structure_hook_factory(lambda tp: _optional_of(tp) is not None, optional_factory)
    converter.register_unstructure_hook_func(
        _is_map, lambda value: {k: converter.unstructure(v) for k, v in value.items()}
    )

    # Sets (a desk's held teams) travel as sorted lists, so a checkpoint is deterministic bytes.
    def frozenset_factory(tp: Any) -> Callable[[Any, Any], frozenset[Any]]:
        (item,) = typing.get_args(tp) or (Any,)
        hook = converter.get_structure_hook(item)

        def structure_frozenset(value: object, _: Any) -> frozenset[Any]:
            if not isinstance(value, list):
                raise TypeError("expected a list")
            return frozenset(hook(element, item) for element in value)

        return structure_frozenset

    converter.register_structure_hook_factory(_is_frozenset, frozenset_factory)
    converter.register_unstructure_hook_func(
        _is_frozenset, lambda value: sorted(converter.unstructure(v) for v in value)
    )

    def renames(cls: type[Any]) -> dict[str, Any]:
        return {field.name: override(rename=camel(field.name)) for field in attrs.fields(cls)}

    def structure_factory(cls: type[Any]) -> Callable[[Any, type[Any]], Any]:
        return make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True, **renames(cls))

    def unstructure_factory(cls: type[Any]) -> Callable[[Any], Any]:
        return make_dict_unstructure_fn(cls, converter, **renames(cls))

    converter.register_structure_hook_factory(attrs.has, structure_factory)
    converter.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    configure_tagged_union(
        TeamCommand,
        converter,
        tag_generator=lambda cls: COMMAND_NAMES[cls],
        tag_name="type",
    )
    configure_tagged_union(
        BoardCommand,
        converter,
        tag_generator=lambda cls: BOARD_COMMAND_NAMES[cls],
        tag_name="type",
    )
    configure_tagged_union(
        DeskCommand,
        converter,
        tag_generator=lambda cls: DESK_COMMAND_NAMES[cls],
        tag_name="type",
    )
    return converter


CONVERTER = _make_converter()
# The tagged unions of the converter, by tag, for the fast path of `from_json` (core/fast_structure.py).
TAGGED_UNIONS: dict[Any, tuple[str, dict[str, type[Any]]]] = {
    union: ("type", {names[cls]: cls for cls in typing.get_args(union)})
    for union, names in (
        (TeamCommand, COMMAND_NAMES),
        (BoardCommand, BOARD_COMMAND_NAMES),
        (DeskCommand, DESK_COMMAND_NAMES),
    )
}
FAST = Compiler(CONVERTER.get_structure_hook, camel, TAGGED_UNIONS)


def to_json(value: object) -> Any:
    """A core value as JSON-ready data (camelCase keys, lists for tuples, enum values)."""
    return CONVERTER.unstructure(value)


def from_json(data: object, cls: type[T]) -> T | Rejected:
    """Structure JSON data as `cls`, or a `bad_request` naming what is wrong. Never raises."""
    try:
        structured: T = FAST.structure_fn(cls)(data)
        return structured
    except Exception:  # not vouched for: the converter decides, with the same value or why not
        pass
    try:
        return CONVERTER.structure(data, cls)
    except Exception as error:  # cattrs raises many shapes; every one of them is the caller's bad input
        return reject(ErrorCode.BAD_REQUEST, _describe(error))


def command_to_json(command: TeamCommand) -> dict[str, Any]:
    data: dict[str, Any] = CONVERTER.unstructure(command, TeamCommand)
    return data


def command_from_json(data: object) -> TeamCommand | Rejected:
    return from_json(data, TeamCommand)  # type: ignore[arg-type]  # a union is a valid structuring target


def desk_command_to_json(command: DeskCommand) -> dict[str, Any]:
    data: dict[str, Any] = CONVERTER.unstructure(command, DeskCommand)
    return data


def desk_command_from_json(data: object) -> DeskCommand | Rejected:
    return from_json(data, DeskCommand)  # type: ignore[arg-type]  # a union is a valid structuring target


# A desk at its bound holds 10,000 notices, and its recovery cost three JSON parses of its checkpoint: the
# parse itself spent most of its time on the 17 names of every notice, and structuring looked each value up by
# its name again. In the parts of a desk checkpoint (io/desk_parts.py) a notice is therefore a row: the values
# of its fields in the order of NOTICE_COLUMNS, which parses in half the time and structures by position. A
# row means exactly the object of those names and values (spec/delivery-v1.md, section 7), and the object
# form is still read: a part or a whole checkpoint written before rows, or by `daemon prune`.
NOTICE_COLUMNS: Final = (
    "id",
    "teamId",
    "kind",
    "subjectId",
    "membershipId",
    "agentId",
    "expiresAt",
    "text",
    "seq",
    "submittedAt",
    "state",
    "reason",
    "updatedAt",
    "startedAt",
    "seenAt",
    "lostAt",
    "lostStartedAt",
)
_KINDS: Final = {kind.value: kind for kind in NoticeKind}
_STATES: Final = {state.value: state for state in DeliveryState}
_REASONS: Final[dict[str | None, Reason | None]] = {None: None, **{reason.value: reason for reason in Reason}}


def notice_row(notice: Notice) -> list[object]:
    """The notice as a row: the values of `to_json(notice)` in the order of NOTICE_COLUMNS."""
    n = notice
    reason = None if n.reason is None else n.reason.value
    return [
        n.id, n.team_id, n.kind.value, n.subject_id, n.membership_id, n.agent_id, n.expires_at, n.text, n.seq,
        n.submitted_at, n.state.value, reason, n.updated_at, n.started_at, n.seen_at, n.lost_at,
        n.lost_started_at,
    ]  # fmt: skip


def desk_from_json(data: object) -> Desk | Rejected:
    """`from_json(data, Desk)` of a desk checkpoint whose notices may be rows (`notice_row`) as well as
    objects: the desk, or the refusal, that the object form of every row gives. Never raises."""
    if type(data) is dict and type(notices := data.get("notices")) is dict:
        try:
            fast: Map[str, Notice] | None = _notices(notices)
        except Exception:  # not vouched for: the object form decides, with the same value or why not
            fast = None
        if fast is not None:
            rest = from_json({**data, "notices": {}}, Desk)
            if not isinstance(rest, Rejected):
                return attrs.evolve(rest, notices=fast)
    objects = _objects(data)
    return objects if isinstance(objects, Rejected) else from_json(objects, Desk)


def _notices(members: dict[Any, Any]) -> Map[str, Notice]:
    """The notices of a checkpoint, each a row or an object, when every one is exactly as `from_json` would
    structure it; raises otherwise (Unsure, or whatever a lookup of a value that is no enum's raises)."""
    of_row, of_object = _notice_of_row, FAST.structure_fn(Notice)
    notices: dict[str, Notice] = {}
    for key, member in members.items():
        if type(key) is not str:
            raise Unsure
        notices[key] = of_row(member) if type(member) is list else of_object(member)
    return Map(notices)


def _notice_of_row(row: list[Any]) -> Notice:
    """A row as the Notice its object form structures to, checked as core/fast_structure.py checks the
    object: exact types (no bool for an int, no str subclass), an enum's own value, a value or None. A row
    of another length does not unpack (ValueError)."""
    (
        id_, team_id, kind, subject_id, membership_id, agent_id, expires_at, text, seq, submitted_at, state,
        reason, updated_at, started_at, seen_at, lost_at, lost_started_at,
    ) = row  # fmt: skip
    if not (
        type(id_) is str
        and type(team_id) is str
        and type(kind) is str
        and type(subject_id) is str
        and type(membership_id) is str
        and type(agent_id) is str
        and type(expires_at) is int
        and type(text) is str
        and type(seq) is int
        and type(submitted_at) is int
        and type(state) is str
        and (reason is None or type(reason) is str)
        and type(updated_at) is int
        and (started_at is None or type(started_at) is int)
        and (seen_at is None or type(seen_at) is int)
        and (lost_at is None or type(lost_at) is int)
        and (lost_started_at is None or type(lost_started_at) is int)
    ):
        raise Unsure
    # Positionally, in Notice's field order (NOTICE_COLUMNS is pinned to it): its own __init__, as the
    # converter calls it, without the cost of 17 keywords.
    return Notice(
        id_, team_id, _KINDS[kind], subject_id, membership_id, agent_id, expires_at, text, seq, submitted_at,
        _STATES[state], _REASONS[reason], updated_at, started_at, seen_at, lost_at, lost_started_at,
    )  # fmt: skip


def _objects(data: object) -> object:
    """`data` with every row of its notices made the object it stands for; a Rejected for a row that has not
    one value for each column."""
    if type(data) is not dict or type(data.get("notices")) is not dict:
        return data
    notices: dict[Any, Any] = {}
    for key, member in data["notices"].items():
        try:
            notices[key] = dict(zip(NOTICE_COLUMNS, member, strict=True)) if type(member) is list else member
        except ValueError:
            detail = f"notice {key!r} is a row of {len(member)} values, not {len(NOTICE_COLUMNS)}"
            return reject(ErrorCode.BAD_REQUEST, detail)
    return {**data, "notices": notices}


def board_command_to_json(command: BoardCommand) -> dict[str, Any]:
    data: dict[str, Any] = CONVERTER.unstructure(command, BoardCommand)
    return data


def board_command_from_json(data: object) -> BoardCommand | Rejected:
    return from_json(data, BoardCommand)  # type: ignore[arg-type]  # a union is a valid structuring target


# A board checkpoint and journal entry say their format (seed 002: "Recovery accepts only valid
# journalVersion: 1 checkpoint and delta entries"); anything else is refused, never repaired.
BOARD_JOURNAL_VERSION = 1


def board_to_json(board: Board) -> dict[str, Any]:
    """A whole board for a checkpoint. Its retained operations are commands of several kinds, so they
    travel tagged like journal entries (a plain Map value would lose which command each is)."""
    data: dict[str, Any] = CONVERTER.unstructure(attrs.evolve(board, operations=Map()))
    data["operations"] = {op: board_command_to_json(command) for op, command in board.operations.items()}
    del data["shares"]  # derived from the operations (B15): a checkpoint stays what it was before shares
    return data


def board_from_json(data: object) -> Board | Rejected:
    if not isinstance(data, dict) or not isinstance(data.get("operations"), dict):
        return reject(ErrorCode.BAD_REQUEST, "a board is an object with 'operations'")
    board = from_json({**data, "operations": {}, "shares": {}}, Board)  # shares: rebuilt below
    if isinstance(board, Rejected):
        return board
    operations: dict[str, BoardCommand] = {}
    for op, entry in data["operations"].items():
        command = board_command_from_json(entry)
        if isinstance(command, Rejected):
            return reject(ErrorCode.BAD_REQUEST, f"operation {op!r}: {command.detail}")
        operations[op] = command
    return attrs.evolve(board, operations=Map(operations), shares=shares_of(operations))


def _describe(error: BaseException) -> str:
    if isinstance(error, cattrs.ClassValidationError | cattrs.IterableValidationError):
        messages = cattrs.transform_error(error)
        return "; ".join(messages) if messages else str(error)
    return str(error) or type(error).__name__


# --- public views: what leaves the owner. Never a member key (Team.keys is not part of any view). ---------


def member_view(member: Membership) -> dict[str, Any]:
    return {
        "id": member.id,
        "machineId": member.machine_id,
        "agentId": member.agent_id,
        "name": member.name,
        "role": member.role,
        "state": member.state.value,
        "joinedAt": member.joined_at,
        "removedAt": member.removed_at,
        "introduction": to_json(member.introduction),
        "introductionOf": member.introduction_of,
    }


def exchange_view(exchange: Exchange) -> dict[str, Any]:
    data: dict[str, Any] = to_json(exchange)
    return data


def team_view(team: Team) -> dict[str, Any]:
    return {
        **team_header(team),
        "members": [member_view(team.members[member_id]) for member_id in team.member_order],
        "exchanges": [exchange_view(team.exchanges[exchange_id]) for exchange_id in team.exchange_order],
    }


def team_header(team: Team) -> dict[str, Any]:
    """A team's own fields, without its records: every view of it starts here (core/team_delta.py too)."""
    return {
        "id": team.id,
        "name": team.name,
        "state": team.state.value,
        "revision": team.revision,
        "createdAt": team.created_at,
    }


def team_summary(team: Team) -> dict[str, Any]:
    return {
        "id": team.id,
        "name": team.name,
        "state": team.state.value,
        "revision": team.revision,
        "members": sum(1 for member in team.members.values() if member.state.value == "active"),
        "exchanges": len(team.exchange_order),
    }


# --- the board's views: what a member or the owner reads of a team's board (notes only through a Page) ---


def board_member_view(board: Board, member: Member) -> dict[str, Any]:
    return {
        "id": member.id,
        "state": member.state.value,
        "roles": [name for name in board.role_order if member.id in board.roles[name].holders],
        "unread": len(member.unread),
    }


def board_view(board: Board) -> dict[str, Any]:
    """The board as every reader sees it: session, roles, tasks and each member's unread count. Note texts
    are not in it: a member reads its own with `read_messages`."""
    return {
        "teamId": board.session.team_id,
        "generation": board.session.generation,
        "revision": board.revision,
        "bytes": board.bytes,
        "members": [board_member_view(board, board.members[member_id]) for member_id in board.member_order],
        "roles": [to_json(board.roles[name]) for name in board.role_order],
        "tasks": [to_json(board.tasks[task_id]) for task_id in board.task_order],
        "notes": len(board.note_order),
    }


def board_result_view(board: Board, result: object) -> Any:
    """The JSON of what a board command returns: a task, role, note, page, or the members."""
    if isinstance(result, Page):
        return {
            "notes": [note_view(note) for note in result.notes],
            "nextOffset": result.next_offset,
            "unread": result.unread,
        }
    if isinstance(result, Note):
        return note_view(result)
    if isinstance(result, tuple):
        return {"members": [board_member_view(board, member) for member in result]}
    return to_json(result)


def note_view(note: Note) -> dict[str, Any]:
    data: dict[str, Any] = to_json(note)
    return data
