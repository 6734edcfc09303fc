# A watcher's pushed changes are deltas (core/team_delta.py): applied to the view a watcher holds, a delta
# gives exactly the view the daemon would send whole, and on a full team one delivery report costs a watcher
# a couple of kilobytes instead of the whole team (issue 18: 383 KB per report).
from __future__ import annotations

import itertools
import json
import socket
from pathlib import Path
from typing import Any

import attrs
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import commands as c
from harness.core.codec import team_view
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import Team
from harness.core.team_delta import HEADER_FIELDS, apply_team_delta, team_delta
from harness.io import home as homes
from tests import raw_ws
from tests.team_helpers import TEAM, Driver
from tests.test_daemon import Api, member, running

# One step of a random history: who asks whom; a reply or a cancel of the k-th latest question, by the member
# who may (its addressee, its asker), so that most steps change a record the older view already holds; time.
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("ask"), st.integers(1, 3), st.integers(1, 3)),
        st.tuples(st.sampled_from(["reply", "cancel"]), st.integers(0, 3)),
        st.tuples(st.just("tick"), st.integers(1, 900_000)),
    ),
    max_size=30,
)


def history(steps: list[tuple[Any, ...]]) -> list[Team]:
    """The team after each step (a rejected step leaves the ledger as it was)."""
    driver = Driver().create()
    teams = [driver.team]
    for kind, *numbers in steps:
        order = driver.team.exchange_order
        if kind == "ask":
            driver.ask(f"q{len(order)}", numbers[0], numbers[1], text=f"question {len(order)}")
        elif kind == "tick":
            driver.tick(numbers[0])
            driver.run(c.Tick(driver.now, TEAM))
        elif numbers[0] < len(order):
            exchange = driver.exchange(order[-1 - numbers[0]])
            if kind == "reply":
                key = next(k for k, m in driver.team.keys.items() if m == exchange.to)
                driver.run(c.Reply(driver.tick(), TEAM, exchange.id, "an answer", member_key=key))
            else:
                key = next(k for k, m in driver.team.keys.items() if m == exchange.from_)
                driver.run(c.Cancel(driver.tick(), TEAM, exchange.id, member_key=key))
        teams.append(driver.team)
    return teams


@settings(max_examples=150, deadline=None)
@given(STEPS, st.data())
def test_a_delta_applied_to_an_older_view_gives_the_newer_view(steps: list[Any], data: st.DataObject) -> None:
    teams = history(steps)
    newer = data.draw(st.integers(0, len(teams) - 1))
    older = data.draw(st.integers(0, newer))
    delta = team_delta(teams[older], teams[newer])
    assert delta is not None  # a team's orders only grow
    assert apply_team_delta(team_view(teams[older]), json.loads(json.dumps(delta))) == team_view(teams[newer])


@settings(max_examples=60, deadline=None)
@given(STEPS)
def test_a_delta_carries_only_what_changed(steps: list[Any]) -> None:
    """Consecutive teams: the delta holds the records the step replaced or added, nothing it shared."""
    teams = history(steps)
    for old, new in itertools.pairwise(teams):
        delta = team_delta(old, new)
        assert delta is not None
        changed = {e for e in new.exchange_order if old.exchanges.get(e) != new.exchanges[e]}
        assert {view["id"] for view in delta["exchanges"]} == changed
        if old is new:
            assert delta["exchanges"] == [] and delta["members"] == []


def test_the_header_is_the_view_without_its_lists() -> None:
    team = Driver().create().team
    view = team_view(team)
    assert set(HEADER_FIELDS) == set(view) - {"members", "exchanges"}
    delta = team_delta(team, team)
    assert delta is not None
    assert {key: view[key] for key in HEADER_FIELDS} == {key: delta[key] for key in HEADER_FIELDS}


def test_orders_that_do_not_extend_have_no_delta() -> None:
    driver = Driver().create()
    driver.ask("q1", 1, 2)
    driver.ask("q2", 2, 3)
    team = driver.team
    reordered = attrs.evolve(team, exchange_order=tuple(reversed(team.exchange_order)))
    assert team_delta(team, reordered) is None
    fewer_members = attrs.evolve(team, member_order=team.member_order[1:])
    assert team_delta(team, fewer_members) is None


def test_a_changed_exchange_replaces_its_record_in_place() -> None:
    driver = Driver().create()
    driver.ask("q1", 1, 2)
    driver.ask("q2", 2, 3)
    old = driver.team
    driver.reply("q1", 2)
    delta = team_delta(old, driver.team)
    assert delta is not None and [view["id"] for view in delta["exchanges"]] == ["q1"]
    applied = apply_team_delta(team_view(old), delta)
    assert applied is not None
    assert [(view["id"], view["state"]) for view in applied["exchanges"]] == [
        ("q1", "answered"),
        ("q2", "open"),
    ]


def test_a_delta_is_refused_on_a_view_at_another_revision() -> None:
    driver = Driver().create()
    base = driver.team
    driver.ask("q1", 1, 2)
    middle = driver.team
    driver.ask("q2", 2, 3)
    delta = team_delta(middle, driver.team)
    assert delta is not None
    assert apply_team_delta(team_view(base), delta) is None


# --- the daemon: bytes on the wire -------------------------------------------------------------------------


def _subscribe(path: Path, token: str, deltas: object) -> tuple[socket.socket, dict[str, Any]]:
    sock = raw_ws.open_unix(path, timeout=60.0)
    assert raw_ws.upgrade(sock).startswith("HTTP/1.1 101")
    fields = {} if deltas is None else {"deltas": deltas}
    request = {"type": "team", "requestId": "w", "action": "subscribe", "teamId": "t1", "ownerToken": token}
    sock.sendall(raw_ws.text(json.dumps({**request, **fields})))
    return sock, _frame(sock)


def _frame(sock: socket.socket) -> dict[str, Any]:
    payload = raw_ws.reply(sock)
    assert payload is not None, "the daemon closed the subscription"
    frame: dict[str, Any] = json.loads(payload)
    frame["bytes"] = len(payload)
    return frame


async def test_a_full_team_pushes_kilobytes_not_the_team(tmp_path: Path) -> None:
    limits = attrs.evolve(DEFAULT_LIMITS, asks_per_minute=1_000)  # the history is made in seconds
    async with running(tmp_path, limits=limits) as daemon:
        owner = await Api.open(daemon)
        await owner("create", id="t1", name="Team", members=[member(n) for n in ("alice", "bob")])
        alice = await Api.open(daemon, (await owner("key", "t1", memberId="alice"))["memberKey"])
        for n in range(120):  # asked and cancelled: each stays in the team's history
            await alice("ask", "t1", id=f"q{n}", to="bob", text=f"question {n} " + "x" * 1_000)
            await alice("cancel", "t1", questionId=f"q{n}")
        token = homes.read_owner_token(daemon.home)
        assert token is not None
        watcher, first = await trio.to_thread.run_sync(_subscribe, daemon.socket_path, token, True)
        whole, whole_first = await trio.to_thread.run_sync(_subscribe, daemon.socket_path, token, None)
        assert first["result"] == whole_first["result"] and first["bytes"] > 120_000
        await alice("ask", "t1", id="q-last", to="bob", text="one more")  # then its delivery is reported
        snapshot = await trio.to_thread.run_sync(_frame, whole)
        assert snapshot["type"] == "team_snapshot" and snapshot["bytes"] > 120_000
        view = first["result"]
        while view != await owner("get", "t1"):  # each push is one delta, until the watcher is current
            delta = await trio.to_thread.run_sync(_frame, watcher)
            assert delta["type"] == "team_delta" and delta["bytes"] < 2_048
            view = apply_team_delta(view, delta["delta"])
        assert view["exchanges"][-1]["id"] == "q-last"
        watcher.close()
        whole.close()


async def test_a_malformed_deltas_field_is_a_bad_request(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        await owner("create", id="t1", name="Team", members=[member("alice")])
        token = homes.read_owner_token(daemon.home)
        assert token is not None
        sock, frame = await trio.to_thread.run_sync(_subscribe, daemon.socket_path, token, "yes")
        assert frame["error"] == "bad_request" and "deltas" in frame["detail"]
        sock.close()
