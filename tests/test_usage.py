# Issue 16, item 13: bounds are visible before they bite. The pure `usage` and `desk_usage` queries, driven
# to 80 % and 100 % of small Limits, where the next command is refused naming the very bound the query
# warned about; and `harness team --team T usage` against a real daemon, for the owner and for a member.
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from harness.core import commands as c
from harness.core import delivery as d
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import MINUTE_MS, Limits
from harness.core.outcome import Accepted
from harness.core.queries import ADVICE, WARN_PERCENT, BoundUse, desk_usage, usage
from harness.core.records import NoticeKind
from harness.io import home as homes
from tests import test_cli_e2e as e2e
from tests.spec_tables import read_table
from tests.team_helpers import TEAM, Driver, member

E = ErrorCode
SMALL = Limits(
    teams=5,
    memberships=5,
    exchanges=10,
    pending_per_sender=5,
    asks_per_minute=5,
    parent_chain=5,
    queued_per_agent=5,
    delivery_records=10,
)


def rows(d: Driver, key: str | None = None, limits: Limits = SMALL) -> dict[str, BoundUse]:
    viewer = None if key is None else d.team.members[d.team.keys[key]]
    found = usage(d.ledger, TEAM, limits, d.now, viewer)
    assert not isinstance(found, Rejected), found
    return {row.bound: row for row in found}


def assert_use(row: BoundUse, use: int, limit: int, *, warning: bool) -> None:
    assert (row.use, row.limit, row.warning) == (use, limit, warning), row
    assert row.ratio == pytest.approx(use / limit)
    assert row.advice == ADVICE[row.bound]


def test_pending_per_sender_warns_at_80_percent_then_bites_where_it_said() -> None:
    """Issue 16: "each bound with its use …, warning from 80 %, with what the user can do"."""
    d = Driver(SMALL, now=1_000).create(members=3)
    for n in range(3):
        d.ask(f"q{n}", 1, 2)
        d.tick(MINUTE_MS)  # out of the rate window: only the sender's bound fills
    d.ask("other", 3, 2)
    pending = rows(d)["pending_per_sender"]
    assert_use(pending, 3, 5, warning=False)
    assert pending.subject == "mem1"  # the sender nearest the bound, not the latest one
    d.tick(MINUTE_MS)
    d.ask("q3", 1, 2)
    assert_use(rows(d)["pending_per_sender"], 4, 5, warning=True)
    d.tick(MINUTE_MS)
    d.ask("q4", 1, 2)
    assert_use(rows(d)["pending_per_sender"], 5, 5, warning=True)
    d.tick(MINUTE_MS)
    d.fails(c.Ask(d.tick(), TEAM, "q5", "mem2", "one more?", member_key="key1"), E.BOUND_EXCEEDED,
            "pending_per_sender")  # fmt: skip
    d.ok(c.Cancel(d.tick(), TEAM, "q0", member_key="key1"))  # what the advice says frees one
    assert_use(rows(d)["pending_per_sender"], 4, 5, warning=True)


def test_a_member_sees_its_own_open_questions_and_chains_and_not_the_owners_teams() -> None:
    """A member sees only what it may read (spec/team-v1.md section 2, Visibility)."""
    d = Driver(SMALL).create(members=3)
    for n in range(4):
        d.ask(f"q{n}", 1, 2)
        d.tick(MINUTE_MS)  # out of the rate window
    d.ask("p1", 3, 2)
    for depth in range(2, 5):
        d.tick(MINUTE_MS)
        d.ask(f"p{depth}", 3, 2, parent_id=f"p{depth - 1}")
    owner = rows(d)
    assert (owner["pending_per_sender"].subject, owner["pending_per_sender"].use) == ("mem1", 4)
    assert (owner["parent_chain"].use, owner["parent_chain"].subject) == (4, "p4")
    assert owner["teams"].use == 1
    third = rows(d, "key3")
    assert "teams" not in third
    assert (third["pending_per_sender"].subject, third["pending_per_sender"].use) == ("mem3", 4)
    first = rows(d, "key1")
    assert (first["pending_per_sender"].subject, first["pending_per_sender"].use) == ("mem1", 4)
    assert (first["parent_chain"].use, first["parent_chain"].subject) == (1, "q0")  # p1..p4 are not its
    assert first["exchanges"].use == 8  # a count is no question's content


def test_exchanges_count_ended_ones_and_the_next_ask_is_refused_at_the_limit() -> None:
    """spec/team-v1.md section 5: "Retained means retained": cancelling frees no exchange."""
    d = Driver(SMALL).create(members=3)
    for n in range(7):
        d.ask(f"q{n}", 1 + n % 3, 1 + (n + 1) % 3)
        d.tick(MINUTE_MS)
    d.ok(c.Cancel(d.tick(), TEAM, "q0", member_key="key1"))
    assert_use(rows(d)["exchanges"], 7, 10, warning=False)
    d.ask("q7", 1, 2)
    assert_use(rows(d)["exchanges"], 8, 10, warning=True)
    assert "archive the team" in rows(d)["exchanges"].advice
    d.tick(MINUTE_MS)
    d.ask("q8", 2, 3)
    d.ask("q9", 3, 1)
    d.tick(MINUTE_MS)
    d.fails(c.Ask(d.tick(), TEAM, "q10", "mem2", "more?", member_key="key3"), E.BOUND_EXCEEDED, "exchanges")
    assert_use(rows(d)["exchanges"], 10, 10, warning=True)


def test_asks_of_the_last_minute_warn_and_leave_the_window() -> None:
    d = Driver(SMALL).create(members=3)
    for n in range(3):
        d.ask(f"q{n}", 1 + n % 3, 1 + (n + 1) % 3)
    assert_use(rows(d)["asks_per_minute"], 3, 5, warning=False)
    d.ask("q3", 2, 1)
    assert_use(rows(d)["asks_per_minute"], 4, 5, warning=True)
    d.ask("q4", 3, 1)
    d.fails(c.Ask(d.tick(), TEAM, "q5", "mem1", "now?", member_key="key2"), E.RATE_LIMITED)
    start = d.team.exchanges["q0"].created_at
    d.now = start + MINUTE_MS  # the window is (now - 60 s, now]: q0 has just left it
    assert_use(rows(d)["asks_per_minute"], 4, 5, warning=True)
    d.now = start + 2 * MINUTE_MS
    assert_use(rows(d)["asks_per_minute"], 0, 5, warning=False)


def test_teams_and_memberships_warn_before_create_and_add_are_refused() -> None:
    d = Driver(SMALL).create(members=4)
    assert_use(rows(d)["memberships"], 4, 5, warning=True)
    for n in (2, 3):
        d.ok(c.CreateTeam(d.tick(), f"t{n}", "Other", (member(1),)))
    assert_use(rows(d)["teams"], 3, 5, warning=False)
    d.ok(c.CreateTeam(d.tick(), "t4", "Other", (member(1),)))
    d.ok(c.ArchiveTeam(d.tick(), "t4"))  # archiving frees no slot
    assert_use(rows(d)["teams"], 4, 5, warning=True)
    d.ok(c.CreateTeam(d.tick(), "t5", "Other", (member(1),)))
    d.fails(c.CreateTeam(d.tick(), "t6", "Other", (member(1),)), E.BOUND_EXCEEDED, "teams")
    assert_use(rows(d)["teams"], 5, 5, warning=True)
    d.ok(c.AddMember(d.tick(), TEAM, member(5)))
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem5"))
    assert_use(rows(d)["memberships"], 5, 5, warning=True)  # removed members stay attributable
    d.fails(c.AddMember(d.tick(), TEAM, member(6)), E.BOUND_EXCEEDED, "memberships")


def test_parent_chain_warns_at_the_deepest_chain_and_bites_there() -> None:
    d = Driver(SMALL).create(members=2)
    d.ask("c1", 1, 2)
    d.ask("short", 2, 1)
    for depth in range(2, 5):
        d.ask(f"c{depth}", 1 + depth % 2, 2 - depth % 2, parent_id=f"c{depth - 1}")
        d.tick(MINUTE_MS)
    chain = rows(d)["parent_chain"]
    assert_use(chain, 4, 5, warning=True)
    assert chain.subject == "c4"
    d.ask("c5", 1, 2, parent_id="c4")
    d.fails(c.Ask(d.tick(), TEAM, "c6", "mem1", "deeper?", member_key="key2", parent_id="c5"),
            E.BOUND_EXCEEDED, "parent_chain")  # fmt: skip
    assert rows(d)["parent_chain"].use == 5
    d.ask("fresh", 2, 1)  # what the advice says still works


def test_limits_lowered_below_what_is_held_show_a_use_above_the_limit() -> None:
    """Issue 16, item 12: "new limits apply to new work": usage shows the overrun, it does not fail."""
    d = Driver(SMALL).create(members=4)
    lower = Limits(memberships=2)
    row = rows(d, limits=lower)["memberships"]
    assert (row.use, row.limit, row.warning, row.ratio) == (4, 2, True, 2.0)


def test_no_use_is_no_warning_and_an_unknown_team_is_not_found() -> None:
    d = Driver(SMALL).create(members=2)
    found = rows(d)
    assert list(found) == [
        "teams",
        "memberships",
        "exchanges",
        "pending_per_sender",
        "asks_per_minute",
        "parent_chain",
    ]
    assert not found["exchanges"].warning and found["pending_per_sender"].subject is None
    missing = usage(d.ledger, "nope", SMALL, d.now)
    assert isinstance(missing, Rejected) and missing.code is E.NOT_FOUND


def test_warning_is_exactly_from_80_percent() -> None:
    assert WARN_PERCENT == 80
    assert [BoundUse("exchanges", use, 500).warning for use in (399, 400, 500, 501)] == [
        False,
        True,
        True,
        True,
    ]
    assert BoundUse("exchanges", 0, 0).warning and BoundUse("exchanges", 0, 0).ratio == 1.0


class DeskDriver:
    """A delivery desk on machine m-one fed Submits for team t1's members (team_helpers' machine)."""

    def __init__(self) -> None:
        self.desk = d.empty_desk("m-one")
        self.now = 1_000
        self.n = 0

    def submit(self, agent: str, member_id: str) -> Accepted[d.Desk] | Rejected:
        self.n += 1
        self.now += 1
        subject, expires = f"q{self.n}", self.now + 60 * MINUTE_MS
        command = d.Submit(self.now, TEAM, f"{TEAM}/{subject}/question", NoticeKind.QUESTION, subject,
                           member_id, "m-one", agent, expires, f"notice {self.n}")  # fmt: skip
        outcome = d.step(self.desk, command, SMALL)
        if isinstance(outcome, Accepted):
            self.desk = outcome.state
        return outcome

    def rows(self, team_driver: Driver, key: str | None = None) -> dict[str, BoundUse]:
        team = team_driver.team
        viewer = None if key is None else team.members[team.keys[key]]
        return {row.bound: row for row in desk_usage(self.desk, team, SMALL, viewer)}


def test_the_desk_warns_of_the_busiest_local_agent_and_of_its_records() -> None:
    """Issue 16: "Today a machine whose desk has held 10,000 delivery records rejects every later notice"."""
    team = Driver(SMALL).create(members=3)
    team.ok(c.AddMember(team.tick(), TEAM, member(4, machine="m-two")))
    desk = DeskDriver()
    for _ in range(3):
        assert isinstance(desk.submit("agent2", "mem2"), Accepted)
    assert isinstance(desk.submit("agent1", "mem1"), Accepted)
    found = desk.rows(team)
    assert_use(found["queued_per_agent"], 3, 5, warning=False)
    assert found["queued_per_agent"].subject == "mem2"
    assert_use(found["delivery_records"], 4, 10, warning=False)
    assert desk.rows(team, "key1")["queued_per_agent"].use == 1  # a member sees its own agent
    assert isinstance(desk.submit("agent2", "mem2"), Accepted)
    assert_use(desk.rows(team)["queued_per_agent"], 4, 5, warning=True)
    assert isinstance(desk.submit("agent2", "mem2"), Accepted)
    refused = desk.submit("agent2", "mem2")
    assert isinstance(refused, Rejected) and refused.bound == "queued_per_agent"
    assert_use(desk.rows(team)["queued_per_agent"], 5, 5, warning=True)
    for _ in range(2):
        assert isinstance(desk.submit("agent3", "mem3"), Accepted)
    assert_use(desk.rows(team)["delivery_records"], 8, 10, warning=True)
    assert isinstance(desk.submit("agent3", "mem3"), Accepted)
    assert isinstance(desk.submit("agent3", "mem3"), Accepted)
    refused = desk.submit("agent3", "mem3")
    assert isinstance(refused, Rejected) and refused.bound == "delivery_records"
    # A session of a member on another machine, or of a removed member, is not this team's here.
    team.ok(c.RemoveMember(team.tick(), TEAM, "mem2"))
    assert desk.rows(team)["queued_per_agent"].subject == "mem3"
    assert desk.rows(team, "key4")["queued_per_agent"].use == 0


def test_the_spec_advice_table_is_the_codes() -> None:
    spec = {row["bound"]: row["advice"] for row in read_table("team-v1.md", "usage-advice")}
    assert spec == dict(ADVICE)


def test_harness_team_usage_for_the_owner_and_a_member(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`harness team --team T usage`, --json and readable, against a real daemon with small bounds: the
    owner sees the sender nearest its bound and this machine's desk; a member sees its own."""
    limits = {**e2e.LIMITS, "exchanges": 5, "queuedPerAgent": 5}
    monkeypatch.setattr(e2e, "LIMITS", limits)
    daemon = e2e.Daemon(tmp_path / "home")
    daemon.start()
    try:
        home = daemon.home
        info = homes.read_daemon_info(home)
        assert info is not None
        here = info["machineId"]
        members = [{"machineId": here, "agentId": name, "name": name} for name in ("alice", "bob", "carol")]
        (tmp_path / "team.json").write_text(json.dumps({"id": "t1", "name": "Build", "members": members}))
        e2e.ok(e2e.cli(home, "team", "--home", str(home), "create", "--file", str(tmp_path / "team.json")))
        roster = {m["name"]: m["id"] for m in e2e.ok(e2e.team(home, "members"))["members"]}
        alice = e2e.ok(e2e.team(home, "key", "alice"))["memberKey"]
        carol = e2e.ok(e2e.team(home, "key", "carol"))["memberKey"]
        for n in range(3):
            e2e.ok(e2e.team(home, "ask", "bob", f"question {n}", key=alice))
        e2e.ok(e2e.team(home, "ask", "bob", "mine", key=carol))

        def owner_rows() -> dict[str, dict[str, object]]:
            body = e2e.ok(e2e.team(home, "usage"))
            assert (body["teamId"], body["machineId"], body["warnPercent"]) == ("t1", here, 80)
            return {row["bound"]: row for row in body["bounds"]}

        found = owner_rows()
        pending = found["pending_per_sender"]
        assert (pending["use"], pending["limit"], pending["warning"]) == (3, 3, True)
        assert pending["subject"] == roster["alice"] and pending["advice"] == ADVICE["pending_per_sender"]
        assert (found["exchanges"]["use"], found["exchanges"]["warning"]) == (4, True)
        assert (found["teams"]["use"], found["teams"]["warning"]) == (1, False)
        # The desk takes the notices after the asks are accepted: wait for it, with a generous deadline.
        deadline = time.monotonic() + 30
        while (queued := found["queued_per_agent"])["use"] < 5 and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the daemon: nothing announces the desk's receipt to a client
            found = owner_rows()
        assert (queued["use"], queued["limit"], queued["warning"], queued["subject"]) == (
            5,  # bob's introduction and four questions, all waiting `offline`
            5,
            True,
            roster["bob"],
        )
        assert found["delivery_records"]["use"] >= 7  # three introductions and four questions

        mine = e2e.ok(e2e.team(home, "usage", key=carol))["bounds"]
        by_bound = {row["bound"]: row for row in mine}
        assert "teams" not in by_bound
        assert (by_bound["pending_per_sender"]["use"], by_bound["pending_per_sender"]["subject"]) == (
            1,
            roster["carol"],
        )
        assert by_bound["queued_per_agent"]["subject"] == roster["carol"]

        env = {k: v for k, v in os.environ.items() if k != "HARNESS_MEMBER_KEY"}
        readable = subprocess.run(
            [*e2e.HARNESS, "team", "--home", str(home), "--team", "t1", "usage", "--wide"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert readable.returncode == 0, readable.stderr
        text = readable.stdout
        assert "pending_per_sender" in text and "FULL pending_per_sender 3/3 (alice)" in text
        assert ADVICE["pending_per_sender"] in " ".join(text.split())
        assert f"! exchanges 4/5: {ADVICE['exchanges']}" in " ".join(text.split())
        assert "teams 1/" not in text  # no advice for a bound with room
    finally:
        daemon.terminate()
