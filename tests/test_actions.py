# The action table (core/actions.py) is the one declaration of each `team` action: the contract's table is
# it, every ledger command is one of its rows or the daemon's own, a built row fills its command's
# attributes with the right kinds, and the daemon's builder turns any frame of such an action into exactly
# the command its row describes (or refuses it naming the field).
from __future__ import annotations

import json
import re
import typing
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core.actions import OWNER_COMMANDS, TEAM_ACTIONS, Field, Kind, Refers, TeamAction
from harness.core.commands import COMMAND_NAMES
from harness.io.rpc import FrameError, parse_request, request_frame
from harness.io.team_actions import COMMAND_CLASSES, build_command
from tests.spec_tables import read_table

BUILT = [action for action in TEAM_ACTIONS.values() if action.answer is not None]
def _cell(action: TeamAction, declared: Field) -> str:
    if action.answer is None:
        return declared.wire
    words = [declared.kind.value, *(["required"] if declared.required else [])]
    words += [declared.refers.value] if declared.refers is not None else []
    return f"{declared.wire} ({', '.join(words)})"


def test_the_contracts_action_table_is_the_codes() -> None:
    rows = read_table("contract.md", "rpc-actions")
    assert [row["action"] for row in rows] == list(TEAM_ACTIONS)
    for row in rows:
        action = TEAM_ACTIONS[row["action"]]
        assert row["fields"] == ", ".join(_cell(action, declared) for declared in action.fields), action.name
        assert row["teamId"] == ("yes" if action.needs_team else "no"), action.name
        assert row["answer"] == (action.answer.value if action.answer else "its handler"), action.name


def test_every_ledger_command_is_an_action_or_the_daemons_own() -> None:
    commands = {action.name for action in TEAM_ACTIONS.values() if action.command}
    assert commands | {"tick", "record_delivery"} == set(COMMAND_NAMES.values())
    assert not commands & {"tick", "record_delivery"}
    assert {"create", "pause", "resume", "archive", "add", "remove", "expire", "tick",
                              "record_delivery"} == OWNER_COMMANDS  # fmt: skip


_TYPES: dict[Kind, list[Any]] = {
    Kind.TEXT: [str, str | None],
    Kind.INT: [int | None],
    Kind.BOOL: [bool],
    Kind.TEXT_LIST: [tuple[str, ...]],
}


@pytest.mark.parametrize("action", BUILT, ids=lambda action: action.name)
def test_a_built_row_fills_its_commands_attributes(action: TeamAction) -> None:
    """Every attribute the command needs is a required field, and each field fills an attribute of its
    kind, so a row that compiles builds a command the reducer can take."""
    attributes = {attribute.name: attribute for attribute in attrs.fields(COMMAND_CLASSES[action.name])}
    needed = {name for name, attribute in attributes.items() if attribute.default is attrs.NOTHING}
    required = {declared.attribute for declared in action.fields if declared.required}
    operation = {declared.attribute for declared in action.fields if declared.refers is Refers.OPERATION}
    assert needed - {"at", "team_id"} == required | operation
    assert len({declared.attribute for declared in action.fields}) == len(action.fields)
    hints = typing.get_type_hints(COMMAND_CLASSES[action.name])
    for declared in action.fields:
        assert hints[declared.attribute] in _TYPES[declared.kind], declared
        optional = not declared.required and declared.refers is not Refers.OPERATION
        assert not optional or attributes[declared.attribute].default is not attrs.NOTHING, declared


_VALUES: dict[Kind, st.SearchStrategy[Any]] = {
    Kind.TEXT: st.text(max_size=12),
    Kind.INT: st.integers(-(2**40), 2**40),
    Kind.BOOL: st.booleans(),
    Kind.TEXT_LIST: st.lists(st.text(max_size=6), max_size=3),
}


@st.composite
def _frames(draw: st.DrawFn) -> tuple[TeamAction, dict[str, Any], str | None]:
    action = draw(st.sampled_from(BUILT))
    fields = {
        declared.wire: draw(_VALUES[declared.kind])
        for declared in action.fields
        if declared.required or draw(st.booleans())
    }
    return action, fields, draw(st.none() | st.text(min_size=1, max_size=8))


def _member(ref: str | None) -> str | None:
    return None if ref is None else f"membership-of-{ref}"


@given(_frames())
def test_the_daemon_builds_exactly_the_command_a_row_describes(
    case: tuple[TeamAction, dict[str, Any], str | None],
) -> None:
    action, fields, member_key = case
    frame = request_frame("r1", action.name, team_id="t1", member_key=member_key, fields=fields)
    command, operation_id = build_command(action, parse_request(frame), _member)
    cls = COMMAND_CLASSES[action.name]
    assert type(command) is cls
    assert (command.at, command.team_id, command.member_key) == (0, "t1", member_key)
    defaults = {attribute.name: attribute.default for attribute in attrs.fields(cls)}
    for declared in action.fields:
        built = getattr(command, declared.attribute)
        given_value = fields.get(declared.wire)
        if declared.refers is Refers.OPERATION:
            assert built == operation_id
            assert built == given_value if given_value else re.fullmatch(r"[0-9a-f]{32}", built)
        elif given_value is None:
            assert built == defaults[declared.attribute], declared
        elif declared.refers is Refers.MEMBER:
            assert built == _member(given_value)
        elif declared.kind is Kind.TEXT_LIST:
            assert built == tuple(given_value)
        else:
            assert built == given_value and type(built) is type(given_value)
    if not any(declared.refers is Refers.OPERATION for declared in action.fields):
        assert operation_id is None


# A value of another kind for each kind (a JSON true is not an integer, though Python's bool is one).
_WRONG: dict[Kind, list[Any]] = {
    Kind.TEXT: [7, None],
    Kind.INT: ["7", True],
    Kind.BOOL: ["yes", 1],
    Kind.TEXT_LIST: ["a", [1]],
}


@pytest.mark.parametrize(
    ("action", "declared"),
    [(action, declared) for action in BUILT for declared in action.fields],
    ids=lambda value: value.name if isinstance(value, TeamAction) else value.wire,
)
def test_a_field_of_the_wrong_kind_or_a_missing_one_is_refused_naming_it(
    action: TeamAction, declared: Field
) -> None:
    others = {other.wire: "x" for other in action.fields if other.required and other is not declared}
    for value in _WRONG[declared.kind]:
        if value is None and not declared.required:
            continue  # an optional field may be absent
        frame = json.dumps({"type": "team", "requestId": "r1", "action": action.name, "teamId": "t",
                            **others, **({} if value is None else {declared.wire: value})})  # fmt: skip
        with pytest.raises(FrameError, match=f"'{declared.wire}'"):
            build_command(action, parse_request(frame), _member)
