# Issue 19: behaviours of core/codec.py that scripts/mutate_core.py found no test pinned. tests/test_codec.py
# round-trips team commands, so a codec that is wrong the same way in both directions (snake_case keys, a
# lax scalar) passed it. These pin the contract's JSON itself: camelCase keys, strict scalars and enums,
# checkpoints of a team, a desk and a board, desk commands, and the public views that leave the owner.
from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from immutables import Map

from harness.core import board as b
from harness.core import commands as c
from harness.core import delivery as d
from harness.core.codec import (
    DESK_COMMAND_NAMES,
    board_command_from_json,
    board_command_to_json,
    board_from_json,
    board_member_view,
    board_result_view,
    board_to_json,
    board_view,
    camel,
    command_from_json,
    command_to_json,
    desk_command_from_json,
    desk_command_to_json,
    exchange_view,
    from_json,
    member_view,
    note_view,
    team_summary,
    team_view,
    to_json,
)
from harness.core.errors import ErrorCode, Rejected
from harness.core.outcome import Accepted
from harness.core.records import DeliveryView, MembershipState, NoticeKind, Team, TeamState
from harness.core.values import replace
from tests.team_helpers import TEAM, Driver


def wire(value: Any) -> Any:
    """What a journal entry or a frame turns `value` into: JSON text and back."""
    return json.loads(json.dumps(value))


def refused(result: object) -> str:
    assert isinstance(result, Rejected), result
    assert result.code is ErrorCode.BAD_REQUEST
    return result.detail


@pytest.fixture
def team() -> Team:
    """A team with every kind of record: an answered exchange, an open child one, a removed member and an
    introduction's delivery view."""
    driver = Driver().create(members=3)
    driver.ask("q1", 1, 2, context="see README")
    driver.reply("q1", 2, evidence=("a.py:1", "b.py:2"))
    driver.ask("q2", 2, 3, parent_id="q1")
    driver.ok(c.RemoveMember(driver.tick(), TEAM, "mem3"))
    team = driver.team
    mem1 = attrs.evolve(team.members["mem1"], introduction=DeliveryView("delivered", None, 1_001))
    return attrs.evolve(team, members=team.members.set("mem1", mem1))


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("member_key", "memberKey"),
        ("from_", "from"),
        ("id", "id"),
        ("answer_delivery", "answerDelivery"),
        ("pending_by_sender", "pendingBySender"),
    ],
)
def test_field_names_become_the_contracts_camel_case_keys(name: str, key: str) -> None:
    assert camel(name) == key


def test_a_command_travels_under_its_contract_keys() -> None:
    """The journal and the wire hold `ttlMs`, `parentId`, `from`, `memberKey` (not the Python names)."""
    ask = c.Ask(7, "t", "q", "mem2", "hi", "ctx", 10_000, "p", False, "mem1", "k")
    assert command_to_json(ask) == {
        "type": "ask", "at": 7, "teamId": "t", "id": "q", "to": "mem2", "text": "hi", "context": "ctx",
        "ttlMs": 10_000, "parentId": "p", "notify": False, "from": "mem1", "memberKey": "k",
    }  # fmt: skip
    assert command_from_json({"type": "tick", "at": 1, "teamId": "t"}) == c.Tick(1, "t")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("at", True),  # a bool is not a number
        ("at", "1"),  # nor is a numeral
        ("at", 1.0),
        ("teamId", 5),  # a number is not a string
        ("teamId", None),
        ("memberKey", 5),
    ],
)
def test_scalars_are_strict(field: str, value: object) -> None:
    refused(command_from_json({"type": "tick", "at": 1, "teamId": "t", field: value}))


def test_a_float_takes_an_integer_but_never_a_bool_or_a_numeral() -> None:
    """JSON does not tell 3 from 3.0, so a float field takes both; it takes nothing else."""
    assert from_json(3, float) == 3 and from_json(2.5, float) == 2.5
    for value in (True, "2.5", None):
        refused(from_json(value, float))
    refused(from_json(2.5, int))


def test_a_bool_field_takes_only_a_bool() -> None:
    ask = command_to_json(c.Ask(1, "t", "q", "mem2", "hi"))
    assert command_from_json(wire(ask)) == c.Ask(1, "t", "q", "mem2", "hi")
    for value in (1, 0, "true", None):
        refused(command_from_json({**ask, "notify": value}))


def test_a_list_field_takes_only_a_list() -> None:
    """A string is iterable, but evidence "abc" is not the evidence ("a", "b", "c")."""
    reply = command_to_json(c.Reply(1, "t", "q", "x", ("e1", "e2")))
    assert reply["evidence"] == ["e1", "e2"]
    for value in ("abc", {"e1": 1}, 3):
        refused(command_from_json({**reply, "evidence": value}))


def test_a_team_checkpoint_round_trips_with_enums_by_value(team: Team) -> None:
    data = wire(to_json(team))
    assert data["state"] == "active" and data["members"]["mem3"]["state"] == "removed"
    assert data["members"]["mem1"]["introduction"] == {
        "state": "delivered",
        "reason": None,
        "updatedAt": 1_001,
    }
    assert data["keys"] == {"key1": "mem1", "key2": "mem2"}
    assert data["memberOrder"] == ["mem1", "mem2", "mem3"]
    restored = from_json(data, Team)
    assert restored == team
    assert isinstance(restored, Team) and restored.state is TeamState.ACTIVE
    assert restored.members["mem3"].state is MembershipState.REMOVED


@pytest.mark.parametrize("state", [True, 1, "stopped", ["active"], None, {"value": "active"}])
def test_an_enum_takes_only_one_of_its_values(team: Team, state: object) -> None:
    refused(from_json({**wire(to_json(team)), "state": state}, Team))


def test_an_enum_not_given_as_a_string_is_refused_naming_its_values() -> None:
    """The detail a caller sees lists what would have been accepted."""
    for value in (True, ["active"], 1.5):
        assert refused(from_json(value, TeamState)) == "expected one of ['active', 'paused', 'archived']"
    assert from_json("paused", TeamState) is TeamState.PAUSED


@pytest.mark.parametrize("value", [["key1", "mem1"], "key1", 1])
def test_a_map_takes_only_an_object(team: Team, value: object) -> None:
    """The map hook's own refusal (cattrs words its TypeError), not whatever a list or a string fails with
    further in."""
    detail = refused(from_json({**wire(to_json(team)), "keys": value}, Team))
    assert detail == "invalid value for type, expected Map @ $.keys"


def test_a_map_checks_its_keys_and_values(team: Team) -> None:
    refused(from_json({**wire(to_json(team)), "keys": {"key1": 1}}, Team))


def desk() -> d.Desk:
    notice = d.Notice(
        "n1", "t1", NoticeKind.QUESTION, "q1", "mem2", "agent2", 99_000, "[team x] hi", 1, 1_000,
        d.DeliveryState.QUEUED, d.Reason.BUSY, 1_000,
    )  # fmt: skip
    session = d.Session("agent2", queue=("n1",), observed=d.Observed.BUSY, timers=((99_000, "n1"),))
    return d.Desk("m-one", Map({"n1": notice}), Map({"agent2": session}), frozenset({"tb", "ta"}), 2, 5)


def test_a_desk_checkpoint_holds_its_held_teams_as_a_sorted_list() -> None:
    """A checkpoint is deterministic bytes: the same desk always writes the same JSON."""
    data = wire(to_json(desk()))
    assert data["heldTeams"] == ["ta", "tb"]
    assert data["sessions"]["agent2"]["timers"] == [[99_000, "n1"]]
    assert data["notices"]["n1"]["reason"] == "busy"
    assert from_json(data, d.Desk) == desk()


@pytest.mark.parametrize("held", ["ta", {"ta": 1}, 1, [1], [None]])
def test_held_teams_take_only_a_list(held: object) -> None:
    refused(from_json({**wire(to_json(desk())), "heldTeams": held}, d.Desk))


DESK_COMMANDS: list[tuple[d.DeskCommand, dict[str, Any]]] = [
    (
        d.WriteStarted(5, "n1", d.Observed.IDLE, 4),
        {"type": "write_started", "at": 5, "noticeId": "n1", "seen": "idle", "seenAt": 4},
    ),
    (d.InboxRead(6, ("n1", "n2")), {"type": "inbox_read", "at": 6, "noticeIds": ["n1", "n2"]}),
    (d.WithdrawTeam(7, "t1"), {"type": "withdraw_team", "at": 7, "teamId": "t1", "reason": "archived"}),
    (d.Restart(8), {"type": "restart", "at": 8}),
]


@pytest.mark.parametrize(("command", "data"), DESK_COMMANDS)
def test_desk_commands_journal_under_their_snake_case_names(
    command: d.DeskCommand, data: dict[str, Any]
) -> None:
    assert desk_command_to_json(command) == data
    assert desk_command_from_json(wire(data)) == command


def test_every_desk_command_has_a_distinct_journal_name() -> None:
    assert DESK_COMMAND_NAMES[d.AnswerRetrieved] == "answer_retrieved"
    assert len(set(DESK_COMMAND_NAMES.values())) == len(DESK_COMMAND_NAMES) == 15


def test_a_malformed_desk_command_is_refused() -> None:
    assert "seen" in refused(desk_command_from_json({"type": "write_started", "at": 5, "noticeId": "n1"}))
    refused(desk_command_from_json({"type": "write_started", "at": 5, "noticeId": "n1", "seen": "asleep",
                                    "seenAt": 4}))  # fmt: skip


def test_a_refusal_names_every_problem_and_where() -> None:
    detail = refused(command_from_json({"type": "tick", "at": "1", "teamId": 5}))
    assert detail == (
        "invalid value for type, expected int @ $.at; invalid value for type, expected str @ $.team_id"
    )
    assert refused(command_from_json({})) == "'type'"  # not a class error: the exception's own words


def test_member_view_is_every_public_field_and_never_a_key(team: Team) -> None:
    assert member_view(team.members["mem1"]) == {
        "id": "mem1", "machineId": "m-one", "agentId": "agent1", "name": "agent-1", "role": "role 1",
        "state": "active", "joinedAt": 1_000, "removedAt": None,
        "introduction": {"state": "delivered", "reason": None, "updatedAt": 1_001}, "introductionOf": None,
    }  # fmt: skip
    assert member_view(team.members["mem3"])["state"] == "removed"
    reintroduced = replace(team.members["mem1"], introduction_of=1_500)
    assert member_view(reintroduced)["introductionOf"] == 1_500  # which introduction the view describes


def test_team_view_lists_members_and_exchanges_in_their_order(team: Team) -> None:
    view = team_view(team)
    assert [m["id"] for m in view["members"]] == ["mem1", "mem2", "mem3"]
    assert view["exchanges"] == [exchange_view(team.exchanges["q1"]), exchange_view(team.exchanges["q2"])]
    assert {k: view[k] for k in ("id", "name", "state", "revision", "createdAt")} == {
        "id": TEAM, "name": "Build Harness", "state": "active", "revision": team.revision, "createdAt": 1_000,
    }  # fmt: skip
    assert "key1" not in json.dumps(view) and "keys" not in view


def test_exchange_view_is_the_exchange_in_contract_keys(team: Team) -> None:
    view = exchange_view(team.exchanges["q1"])
    assert view["from"] == "mem1" and view["context"] == "see README" and view["state"] == "answered"
    assert view["answer"]["memberId"] == "mem2" and view["answer"]["evidence"] == ["a.py:1", "b.py:2"]
    assert view["parentId"] is None and exchange_view(team.exchanges["q2"])["parentId"] == "q1"


def test_team_summary_counts_active_members_only(team: Team) -> None:
    assert team_summary(team) == {
        "id": TEAM, "name": "Build Harness", "state": "active", "revision": team.revision, "members": 2,
        "exchanges": 2,
    }  # fmt: skip


# --- the board's codec: a checkpoint with its tagged operations, and the views a reader gets ---------------

SESSION = b.Session("t1", 1)


def _board() -> b.Board:
    """Members m1 and m2, role `lead` held by m1, one task, one note m1 -> m2 that m2 has not read yet."""
    board, now = b.empty_board(SESSION), 1_000
    commands: list[b.BoardCommand] = [
        b.SetMembers("op1", SESSION, None, now, ("m1", "m2")),
        b.DefineRole("op2", SESSION, None, now + 1, "lead", "Leads."),
        b.TakeRole("op3", SESSION, None, now + 2, "lead", "m1"),
        b.AddTask("op4", SESSION, "m1", now + 3, "Write the spec"),
        b.SendNote("op5", SESSION, "m1", now + 4, b.Addressee(b.AddresseeKind.MEMBER, "m2"), "Hello"),
    ]
    for command in commands:
        outcome = b.step(board, command)
        assert isinstance(outcome, Accepted), outcome
        board = outcome.state
    return board


def test_a_board_checkpoint_round_trips_with_each_operation_tagged_by_its_kind() -> None:
    """A checkpoint's retained operations are commands of several kinds: each travels as a tagged journal
    entry, so the board read back has the very commands it had."""
    board = _board()
    data = wire(board_to_json(board))
    assert data["operations"]["op5"] == board_command_to_json(board.operations["op5"])
    assert (
        data["operations"]["op5"]["type"] == "send_note"
        and data["operations"]["op2"]["type"] == "define_role"
    )
    assert board_from_json(data) == board
    assert (
        board_command_from_json(wire(board_command_to_json(board.operations["op4"])))
        == board.operations["op4"]
    )


def test_a_malformed_board_checkpoint_is_refused_naming_what_is_wrong() -> None:
    """Seed 002: recovery accepts only a valid checkpoint; anything else is refused, never repaired."""
    data = wire(board_to_json(_board()))
    for shape in (
        [],
        {key: value for key, value in data.items() if key != "operations"},
        {**data, "operations": []},
    ):
        assert refused(board_from_json(shape)) == "a board is an object with 'operations'"
    assert "revision" in refused(board_from_json({**data, "revision": "1"}))
    bad_operation = {**data, "operations": {**data["operations"], "op9": {"type": "no_such_command"}}}
    assert refused(board_from_json(bad_operation)).startswith("operation 'op9': ")


def test_the_board_views_show_members_roles_tasks_and_counts_never_note_texts() -> None:
    board = _board()
    m1, m2 = board.members["m1"], board.members["m2"]
    assert board_member_view(board, m1) == {"id": "m1", "state": "active", "roles": ["lead"], "unread": 0}
    assert board_member_view(board, m2) == {"id": "m2", "state": "active", "roles": [], "unread": 1}
    view = board_view(board)
    assert view == {
        "teamId": "t1",
        "generation": 1,
        "revision": board.revision,
        "bytes": board.bytes,
        "members": [board_member_view(board, m1), board_member_view(board, m2)],
        "roles": [to_json(board.roles["lead"])],
        "tasks": [to_json(board.tasks["op4"])],
        "notes": 1,
    }
    assert "Hello" not in json.dumps(view)


def test_a_board_commands_result_is_shown_by_its_kind() -> None:
    board = _board()
    note = board.notes["op5"]
    assert board_result_view(board, note) == note_view(note) == wire(to_json(note))
    page = b.Page((note,), None, 0)
    assert board_result_view(board, page) == {"notes": [note_view(note)], "nextOffset": None, "unread": 0}
    members = (board.members["m1"],)
    assert board_result_view(board, members) == {"members": [board_member_view(board, board.members["m1"])]}
    assert board_result_view(board, board.tasks["op4"]) == to_json(board.tasks["op4"])


def test_board_records_carry_the_seeds_journal_version_1() -> None:
    """Seed 002: "Recovery accepts only valid journalVersion: 1 checkpoint and delta entries". The number is
    the seed's, not ours to pick: a board journal written with any other is one no other reader accepts."""
    from harness.core import board_recovery

    record = wire(board_recovery.checkpoint_record(_board()))
    assert record["journalVersion"] == 1 and board_from_json(record["board"]) == _board()
