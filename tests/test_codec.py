# The codec is the journal's and the wire's only translation: every command survives a JSON round trip
# unchanged, and malformed input is refused with bad_request, never an exception.
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from harness.core import commands as c
from harness.core.codec import command_from_json, command_to_json
from harness.core.errors import ErrorCode, Rejected

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
