# Issue 18: `from_json` tries core/fast_structure.py before the strict converter. The fast path may only ever
# save time: for any input, hostile or damaged, `from_json` must answer exactly what the converter alone
# answers (the same value, of the same types, or the same refusal with the same words). A Hypothesis test
# damages real checkpoints and commands at random and compares the two; the others pin that the fast path
# really is taken for well-formed documents, which is where the time goes.
from __future__ import annotations

import copy
import enum
import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from immutables import Map

from harness.core import board as b
from harness.core import commands as c
from harness.core import delivery as d
from harness.core.codec import (
    CONVERTER,
    FAST,
    TAGGED_UNIONS,
    _describe,
    board_command_to_json,
    camel,
    command_to_json,
    desk_command_to_json,
    from_json,
    to_json,
)
from harness.core.errors import ErrorCode, Rejected
from harness.core.fast_structure import Compiler, Unsure
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted, reject
from harness.core.records import DeliveryView, NoticeKind, Team
from tests.team_helpers import TEAM, Driver


def wire(value: Any) -> Any:
    return json.loads(json.dumps(value))


def converter_only(data: object, cls: Any) -> object:
    """What `from_json` answered before it had a fast path."""
    try:
        return CONVERTER.structure(data, cls)
    except Exception as error:
        return reject(ErrorCode.BAD_REQUEST, _describe(error))


def _team() -> Team:
    driver = Driver().create(members=3)
    driver.ask("q1", 1, 2, context="see README")
    driver.reply("q1", 2, evidence=("a.py:1", "b.py:2"))
    driver.ask("q2", 2, 3, parent_id="q1")
    driver.ok(c.RemoveMember(driver.tick(), TEAM, "mem3"))
    team = driver.team
    mem1 = attrs.evolve(team.members["mem1"], introduction=DeliveryView("delivered", None, 1_001))
    return attrs.evolve(team, members=team.members.set("mem1", mem1))


def _desk() -> d.Desk:
    """Notices queued, held, written and read; a busy look, a timer and a held team."""
    desk, now = d.empty_desk("m-one"), 1_000

    def run(command: d.DeskCommand) -> None:
        nonlocal desk
        outcome = d.step(desk, command, DEFAULT_LIMITS)
        assert isinstance(outcome, Accepted), outcome
        desk = outcome.state

    for n in range(4):
        run(d.Submit(now, f"t{n % 2}", f"n{n}", NoticeKind.QUESTION, f"q{n}", "mem2", "m-one", "agent2",
                     now + 99_000, f"[team] q{n}"))  # fmt: skip
    run(d.Hold(now, "t1"))
    now += DEFAULT_LIMITS.write_settle_ms
    run(d.Observe(now, "agent2", d.Observed.IDLE))
    run(d.WriteStarted(now + 1, "n0", d.Observed.IDLE, now))
    run(d.WriteFinished(now + 2, "n0", d.WriteResult.OK))
    run(d.Observe(now + 3, "agent2", d.Observed.BUSY))
    return desk


def _board() -> b.Board:
    board, session = b.empty_board(b.Session("team-b", 1)), b.Session("team-b", 1)
    commands: list[b.BoardCommand] = [
        b.SetMembers("op1", session, None, 1_000, ("m1", "m2")),
        b.DefineRole("op2", session, None, 1_001, "lead", "Leads."),
        b.TakeRole("op3", session, None, 1_002, "lead", "m1"),
        b.AddTask("op4", session, "m1", 1_003, "Write the spec"),
        b.SendNote("op5", session, "m1", 1_004, b.Addressee(b.AddresseeKind.MEMBER, "m2"), "Hello"),
    ]
    for command in commands:
        outcome = b.step(board, command)
        assert isinstance(outcome, Accepted), outcome
        board = outcome.state
    return board


BOARD = _board()
CASES: list[tuple[Any, Any]] = [
    (wire(to_json(_team())), Team),
    (wire(to_json(_desk())), d.Desk),
    (wire({**to_json(attrs.evolve(BOARD, operations=Map())), "operations": {}}), b.Board),
    (wire(to_json(DEFAULT_LIMITS)), Limits),
    (
        wire(command_to_json(c.Ask(7, "t", "q", "mem2", "hi", "ctx", 10_000, "p", False, "m1", "k"))),
        c.TeamCommand,
    ),
    (wire(command_to_json(c.Reply(8, "t", "q", "x", ("e1", "e2"), member_key="k"))), c.TeamCommand),
    (wire(desk_command_to_json(d.InboxRead(3, ("n1", "n2")))), d.DeskCommand),
    (wire(desk_command_to_json(d.WriteStarted(3, "n1", d.Observed.IDLE, 2))), d.DeskCommand),
    *((wire(board_command_to_json(command)), b.BoardCommand) for command in BOARD.operations.values()),
    (["idle", "busy"], tuple[d.Observed, ...]),  # no record holds one yet; the fast path must not lag
]


@pytest.mark.parametrize(("data", "cls"), CASES)
def test_the_fast_path_structures_well_formed_documents_itself(data: Any, cls: Any) -> None:
    """No fallback for what a daemon reads at every start: that is the time the fast path is for."""
    fast = FAST.structure_fn(cls)(data)
    assert fast == converter_only(data, cls) and repr(fast) == repr(converter_only(data, cls))
    assert from_json(data, cls) == fast


class Level(enum.IntEnum):
    LOW = 1  # an enum of int values: the fast path checks only str ones


@attrs.frozen
class Node:
    """A type that contains itself."""

    name: str
    child: Node | None = None


@attrs.frozen
class Defaults:
    """Absent keys: a plain default and a factory's."""

    name: str
    count: int = 0
    tags: tuple[str, ...] = attrs.field(factory=tuple)
    seen: Map[str, int] = attrs.field(factory=Map)


# Shapes no record holds yet, each with a fast form; the converter structures them the same.
SHAPES: list[tuple[Any, Any]] = [
    ("s", str), (3, int), (True, bool), (2.5, float), (2, float), ("idle", d.Observed), (None, int | None),
    ([1, "a"], tuple[int, str]), (["idle", 1], tuple[d.Observed, int]), (["b", "a"], frozenset[str]),
    (["busy"], frozenset[d.Observed]), ({"k": ["x"]}, Map[str, tuple[str, ...]]),
    ({"idle": 1}, Map[d.Observed, int]),
    ({"name": "a", "child": {"name": "b", "child": {"name": "c"}}}, Node),
    ({"name": "a"}, Defaults), ({"name": "a", "count": 2, "tags": ["t"], "seen": {"x": 1}}, Defaults),
]  # fmt: skip


@attrs.frozen
class Late:
    name: str
    size: int = attrs.field(init=False, default=0)


@attrs.frozen
class Named:
    name: str = attrs.field(kw_only=True)


@attrs.frozen
class Derived:
    name: str
    upper: str = attrs.field(default=attrs.Factory(lambda self: self.name.upper(), takes_self=True))


# What has no fast form: the converter's own hooks structure it, inside the fast path.
LEFT_TO_CONVERTER: list[tuple[Any, Any]] = [
    (1, Level), ({"a": 1}, dict[str, int]), (["a"], list[str]), ({"name": "a"}, Late), ({"name": "a"}, Named),
    ({"name": "a"}, Derived),
]  # fmt: skip


def test_well_formed_documents_need_nothing_of_the_converter() -> None:
    """Every type of a checkpoint and a command has its fast form: none falls back to the converter's hooks,
    which are the cost this module exists to avoid. An enum of int values is left to the converter."""
    asked: list[Any] = []

    def slow(tp: Any) -> Any:
        asked.append(tp)
        return CONVERTER.get_structure_hook(tp)

    compiler = Compiler(slow, camel, TAGGED_UNIONS)
    for data, cls in [*CASES, *SHAPES]:
        built = compiler.structure_fn(cls)(data)
        assert repr(built) == repr(CONVERTER.structure(data, cls))
    assert asked == []
    for data, cls in LEFT_TO_CONVERTER:
        assert repr(compiler.structure_fn(cls)(data)) == repr(CONVERTER.structure(data, cls))
    assert asked == [cls for _, cls in LEFT_TO_CONVERTER]


class Sub(str):
    """Not something JSON makes, but `from_json` takes any object."""


def _places(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in a document, outermost first."""
    places: list[tuple[Any, Any]] = []
    stack = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            places.append((node, key))
            stack.append(value)
    return places


KNOWN_WORDS = [
    *(
        "queued",
        "busy",
        "idle",
        "question",
        "active",
        "removed",
        "type",
        "ask",
        "tick",
        "submit",
        "startedAt",
    ),
    *("notices", "heldTeams", "evidence", "from", "text", "observed", "member", "extra"),
]
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3) | st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(KNOWN_WORDS),
    st.text(max_size=6),
    st.sampled_from(KNOWN_WORDS).map(Sub),
    st.lists(st.sampled_from(KNOWN_WORDS) | st.integers(), max_size=3),
    st.lists(st.text(max_size=3), max_size=2).map(tuple),
    st.dictionaries(st.sampled_from(KNOWN_WORDS), st.integers() | st.text(max_size=3), max_size=2),
)


@st.composite
def damaged(draw: st.DrawFn) -> tuple[Any, Any]:
    data, cls = draw(st.sampled_from(CASES))
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        places = _places(data)
        if not places or draw(st.integers(0, 20)) == 0:
            data = copy.deepcopy(draw(values))  # the whole document is something else
            continue
        container, key = draw(st.sampled_from(places))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add", "copy"]))
        if action == "replace":
            container[key] = copy.deepcopy(draw(values))  # a drawn value may come back in a later draw
        elif action == "copy":  # a value of the right shape in the wrong place
            container[key] = copy.deepcopy(draw(st.sampled_from(places))[0])
        elif isinstance(container, dict) and action == "delete":
            del container[key]
        elif isinstance(container, dict):
            container[draw(st.sampled_from(KNOWN_WORDS))] = copy.deepcopy(draw(values))
        else:
            container.append(copy.deepcopy(draw(values)))
    return data, cls


@settings(max_examples=400)
@given(damaged())
def test_any_input_gets_exactly_the_converters_answer(case: tuple[Any, Any]) -> None:
    data, cls = case
    expected = converter_only(data, cls)
    result = from_json(data, cls)
    # repr tells apart what == does not: an enum member from its str value, 1 from 1.0 and from True.
    assert result == expected and repr(result) == repr(expected)


@pytest.mark.parametrize(
    "change",
    [
        lambda notice: notice.pop("startedAt"),  # absent: the class's default
        lambda notice: notice.update(reason=None),
        lambda notice: notice.update(expiresAt=2**70),  # JSON numbers have no size
    ],
)
def test_the_fast_path_builds_what_the_converter_builds(change: Any) -> None:
    data = wire(to_json(_desk()))
    change(data["notices"]["n0"])
    fast = FAST.structure_fn(d.Desk)(data)
    assert fast == converter_only(data, d.Desk) and repr(fast) == repr(converter_only(data, d.Desk))


@pytest.mark.parametrize(
    "change",
    [
        lambda notice: notice.update(state="nonsense"),
        lambda notice: notice.update(state=Sub("queued")),  # the converter decides about a str subclass
        lambda notice: notice.update(seq=True),
        lambda notice: notice.update(extra=1),
        lambda notice: notice.pop("text"),
    ],
)
def test_the_fast_path_leaves_anything_unusual_to_the_converter(change: Any) -> None:
    data = wire(to_json(_desk()))
    change(data["notices"]["n0"])
    with pytest.raises((Unsure, KeyError)):
        FAST.structure_fn(d.Desk)(data)
    assert isinstance(from_json(data, d.Desk), Rejected | d.Desk)
