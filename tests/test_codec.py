# The codec is the journal's and the wire's only translation: every command survives a JSON round trip
# unchanged, and malformed input is refused with bad_request, never an exception. A desk checkpoint's notices
# may be rows (io/desk_parts.py writes them so): a row must mean exactly the object of its columns, for any
# input, well formed, damaged or hostile.
from __future__ import annotations

import copy
import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from immutables import Map

from harness.core import codec
from harness.core import commands as c
from harness.core import delivery as d
from harness.core.codec import (
    CONVERTER,
    NOTICE_COLUMNS,
    _describe,
    _notices,
    camel,
    command_from_json,
    command_to_json,
    desk_from_json,
    from_json,
    notice_row,
    to_json,
)
from harness.core.errors import ErrorCode, Rejected
from harness.core.outcome import reject
from harness.core.records import NoticeKind

text = st.text(max_size=40)
ids = st.text(alphabet="abcdef0123456789-", min_size=1, max_size=12)
maybe = st.none() | text
new_member = st.builds(c.NewMember, ids, ids, ids, text, text, ids)
commands = st.one_of(
    st.builds(c.CreateTeam, st.integers(), ids, text, st.lists(new_member, max_size=3).map(tuple)),
    st.builds(c.PauseTeam, st.integers(), ids, st.none() | ids),
    st.builds(c.ResumeTeam, st.integers(), ids),
    st.builds(c.ArchiveTeam, st.integers(), ids),
    st.builds(c.AddMember, st.integers(), ids, new_member),
    st.builds(c.RemoveMember, st.integers(), ids, ids),
    st.builds(
        c.Ask,
        st.integers(),
        ids,
        ids,
        ids,
        text,
        maybe,
        st.none() | st.integers(),
        maybe,
        st.booleans(),
        maybe,
        maybe,
    ),
    st.builds(c.Reply, st.integers(), ids, ids, text, st.lists(text, max_size=3).map(tuple), maybe, maybe),
    st.builds(c.Cancel, st.integers(), ids, ids, maybe),
    st.builds(c.Tick, st.integers(), ids),
    st.builds(c.RecordDelivery, st.integers(), ids, text, text, maybe),
)


@given(commands)
def test_every_command_round_trips_through_json(command: c.TeamCommand) -> None:
    data = json.loads(json.dumps(command_to_json(command)))
    assert data["type"] == c.COMMAND_NAMES[type(command)]
    assert command_from_json(data) == command


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    )
)
def test_arbitrary_json_is_refused_or_structured_never_raises(data: object) -> None:
    result = command_from_json(data)
    assert isinstance(result, (Rejected, *c.TEAM_COMMANDS))
    if isinstance(result, Rejected):
        assert result.code is ErrorCode.BAD_REQUEST and result.detail


@given(commands, st.sampled_from(["extra", "memberKey", "at"]))
def test_unknown_keys_and_wrong_types_are_refused(command: c.TeamCommand, key: str) -> None:
    data = command_to_json(command)
    if key == "extra":
        data["extra"] = 1
    elif key == "memberKey":
        data["memberKey"] = 5
    else:
        data["at"] = str(data["at"])
    result = command_from_json(data)
    assert isinstance(result, Rejected) and result.code is ErrorCode.BAD_REQUEST


# --- a desk checkpoint's notices as rows ----------------------------------------------------------------

names = st.text(max_size=10)
stamps = st.integers(0, 10**13) | st.integers()
maybe_stamp = st.none() | stamps
notices = st.builds(
    d.Notice,
    names,
    names,
    st.sampled_from(NoticeKind),
    names,
    names,
    names,
    stamps,
    st.text(max_size=60),
    stamps,
    stamps,
    st.sampled_from(d.DeliveryState),
    st.none() | st.sampled_from(d.Reason),
    stamps,
    maybe_stamp,
    maybe_stamp,
    maybe_stamp,
    maybe_stamp,
)
sessions = st.builds(
    d.Session,
    names,
    st.lists(names, max_size=3).map(tuple),
    st.lists(names, max_size=2).map(tuple),
    st.none() | names,
    st.none() | st.sampled_from(d.Observed),
    stamps,
    stamps,
    st.lists(st.tuples(stamps, names), max_size=2).map(tuple),
)
desks = st.builds(
    d.Desk,
    names,
    st.dictionaries(names, notices, max_size=6).map(Map),
    st.dictionaries(names, sessions, max_size=2).map(Map),
    st.frozensets(names, max_size=3),
    stamps,
    stamps,
)


def wire(value: Any) -> Any:
    return json.loads(json.dumps(value))


def stored(desk: d.Desk, rows: st.DataObject | None = None) -> Any:
    """The desk's checkpoint payload as a store gives it back: every notice a row, or (drawn) some objects."""
    data = wire(to_json(desk))
    for key, notice in desk.notices.items():
        if rows is None or rows.draw(st.booleans()):
            data["notices"][key] = wire(notice_row(notice))
    return data


def as_objects(data: Any) -> Any:
    """What the rows of a checkpoint stand for (spec/delivery-v1.md, section 7): each the object of the
    columns' names and its values."""
    if not isinstance(data, dict) or not isinstance(data.get("notices"), dict):
        return data
    members = data["notices"].items()
    objects = {key: dict(zip(NOTICE_COLUMNS, m, strict=True)) if type(m) is list else m for key, m in members}
    return {**data, "notices": objects}


def converter_only(data: object) -> object:
    """What `from_json(data, d.Desk)` answered before any fast path."""
    try:
        return CONVERTER.structure(data, d.Desk)
    except Exception as error:
        return reject(ErrorCode.BAD_REQUEST, _describe(error))


def test_the_columns_are_the_notices_fields_in_their_order() -> None:
    """A row is structured by position: its columns must stay the class's fields, in the class's order."""
    assert tuple(camel(field.name) for field in attrs.fields(d.Notice)) == NOTICE_COLUMNS


@given(notices)
def test_a_row_is_the_values_of_the_notices_object_in_column_order(notice: d.Notice) -> None:
    row = notice_row(notice)
    assert row == [to_json(notice)[column] for column in NOTICE_COLUMNS]
    assert json.dumps(row) == json.dumps(list(to_json(notice).values()))
    assert all(type(value) in (str, int, type(None)) for value in row)  # plain JSON values, no enum members


@given(desks, st.data())
def test_a_checkpoint_of_rows_and_objects_decodes_to_the_desk(desk: d.Desk, data: st.DataObject) -> None:
    payload = stored(desk, data)
    decoded = desk_from_json(payload)
    objects = from_json(wire(to_json(desk)), d.Desk)
    assert decoded == desk == objects and repr(decoded) == repr(objects)  # a set's repr shows its order
    assert _notices(payload["notices"]) == desk.notices  # structured by the fast path itself


class Sub(str):
    """Not something JSON makes, but a decoder takes any object."""


def test_rows_are_structured_by_the_fast_path_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """A well-formed checkpoint of rows is never made objects for the converter: the time rows save."""
    desk = d.Desk("m1", Map({"n1": _notice(), "n2": attrs.evolve(_notice(), id="n2", reason=None)}))
    data = stored(desk)

    def no_objects(data: object) -> object:
        raise AssertionError("the slow path was taken")

    monkeypatch.setattr(codec, "_objects", no_objects)
    assert desk_from_json(data) == desk


@pytest.mark.parametrize("key", [Sub("n1"), 1, None])
def test_a_notice_under_a_key_json_never_makes_gets_the_converters_answer(key: object) -> None:
    data = stored(d.Desk("m1", Map({"n1": _notice()})))
    data["notices"] = {key: data["notices"]["n1"]}
    result = desk_from_json(data)
    assert isinstance(result, Rejected) and result == converter_only(as_objects(data))


ROW_VALUES = [
    None, True, False, 0, -1, 2**70, 1.5, 1.0, "", "queued", "question", "inbox", "nonsense", [], {}, ["a"],
    ("t",), d.DeliveryState.QUEUED, NoticeKind.QUESTION,
]  # fmt: skip


@st.composite
def damaged(draw: st.DrawFn) -> Any:
    """A stored checkpoint (rows and objects), damaged in one to three places: a row's value, its length,
    an object's key, the desk's own fields, a member that is neither."""
    data = copy.deepcopy(stored(draw(desks.filter(lambda desk: len(desk.notices) > 0)), draw(st.data())))
    value = st.sampled_from(ROW_VALUES) | st.text(max_size=4) | st.text(max_size=4).map(Sub)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(sorted(data["notices"])))
        member = data["notices"][key]
        action = draw(st.sampled_from(["value", "value", "length", "member", "desk", "key"]))
        if action == "value" and type(member) is list and member:
            member[draw(st.integers(0, len(member) - 1))] = copy.deepcopy(draw(value))
        elif action == "value" and type(member) is dict:
            member[draw(st.sampled_from(NOTICE_COLUMNS))] = copy.deepcopy(draw(value))
        elif action == "length" and type(member) is list:
            if member and draw(st.booleans()):
                member.pop(draw(st.integers(0, len(member) - 1)))
            else:
                member.append(copy.deepcopy(draw(value)))
        elif action in ("length", "member"):
            data["notices"][key] = copy.deepcopy(draw(value))
        elif action == "desk":
            field = draw(st.sampled_from(["machineId", "nextSeq", "heldTeams", "sessions", "extra"]))
            data[field] = copy.deepcopy(draw(value))
        else:
            data["notices"][draw(value.filter(lambda v: type(v) is str))] = copy.deepcopy(member)
    return data


@settings(max_examples=300)
@given(damaged())
def test_any_stored_checkpoint_gets_the_answer_of_its_object_form(data: Any) -> None:
    """Hostile or damaged, a checkpoint of rows is refused or decoded exactly as the object form of its
    rows is by the converter alone (the same value, of the same types, or the same words); a row that has
    not one value for each column is refused."""
    result = desk_from_json(data)
    members = data["notices"].items()
    odd = [key for key, member in members if type(member) is list and len(member) != len(NOTICE_COLUMNS)]
    if odd:
        assert isinstance(result, Rejected) and result.code is ErrorCode.BAD_REQUEST
        assert result.detail.startswith(f"notice {odd[0]!r} is a row of ")
        return
    expected = converter_only(as_objects(data))
    assert result == expected and repr(result) == repr(expected)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("seq", True),  # a bool is no int
        ("expiresAt", 1.0),
        ("state", "nonsense"),
        ("kind", "bogus"),
        ("reason", 7),
        ("text", None),
        ("startedAt", "5"),
    ],
)
def test_a_row_with_a_wrong_value_is_refused_naming_its_field(column: str, value: object) -> None:
    desk = d.Desk("m1", Map({"n1": _notice()}))
    data = stored(desk)
    data["notices"]["n1"][NOTICE_COLUMNS.index(column)] = value
    result = desk_from_json(data)
    expected = converter_only(as_objects(data))
    assert isinstance(result, Rejected) and result == expected and repr(result) == repr(expected)
    assert f".{attrs.fields(d.Notice)[NOTICE_COLUMNS.index(column)].name}" in result.detail


def test_a_row_of_what_json_never_makes_gets_the_converters_answer() -> None:
    """A str subclass for an enum (no parser makes one): the converter decides, and takes it."""
    data = stored(d.Desk("m1", Map({"n1": _notice()})))
    data["notices"]["n1"][NOTICE_COLUMNS.index("kind")] = Sub("question")
    assert desk_from_json(data) == converter_only(as_objects(data)) == d.Desk("m1", Map({"n1": _notice()}))


@pytest.mark.parametrize("length", [0, 16, 18])
def test_a_row_of_another_length_is_refused(length: int) -> None:
    data = stored(d.Desk("m1", Map({"n1": _notice()})))
    data["notices"]["n1"] = (data["notices"]["n1"] * 2)[:length]
    refused = reject(ErrorCode.BAD_REQUEST, f"notice 'n1' is a row of {length} values, not 17")
    assert desk_from_json(data) == refused


def test_an_object_form_checkpoint_gets_from_jsons_own_answer() -> None:
    """Without rows nothing changes: a whole checkpoint (`daemon prune`) or parts written before rows."""
    desk = d.Desk("m1", Map({"n1": _notice()}), held_teams=frozenset({"t2"}))
    data = wire(to_json(desk))
    assert desk_from_json(data) == from_json(data, d.Desk) == desk
    for broken in ({**data, "nextSeq": "1"}, {**data, "notices": {"n1": {**data["notices"]["n1"], "x": 1}}}):
        assert desk_from_json(broken) == from_json(broken, d.Desk)
        assert isinstance(desk_from_json(broken), Rejected)
    for other in (None, [], "desk", {"notices": []}, {"machineId": "m1"}):
        assert desk_from_json(other) == from_json(other, d.Desk)


def _notice() -> d.Notice:
    return d.Notice(
        "n1", "t1", NoticeKind.QUESTION, "q1", "mem1", "a1", 10**12, "hello", 1, 5,
        d.DeliveryState.UNCONFIRMED, d.Reason.RESTART, 9, 7, 6, None, None,
    )  # fmt: skip
