# Issue 16 item 12, "limits never corrupt a team": a real daemon filled under some HARNESS_LIMITS and started
# again under lower ones. Before, replay refused the team's own journal and the team read corrupt_state; now
# the lower limits apply to new work only and `harness doctor` names what is over them.
from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from harness.core import commands as c
from harness.core import delivery as d
from harness.core.codec import desk_command_to_json
from harness.core.errors import ErrorCode, Rejected
from harness.core.invariants import step_violations
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.records import NoticeKind
from harness.core.team import step
from harness.io import home as homes
from harness.io.desk_runner import replay_desk
from harness.io.journal_files import Entry, Recovery
from tests import test_cli_e2e as e2e
from tests.team_helpers import TEAM, Driver

FILLED = {**e2e.LIMITS, "pendingPerSender": 3, "exchanges": 10, "memberships": 4}
LOWERED = {**e2e.LIMITS, "pendingPerSender": 1, "exchanges": 3, "memberships": 2}


def _held(home: Path) -> list[tuple[object, ...]]:
    """What the team holds, without the delivery views its desk goes on reporting."""
    exchanges = e2e.ok(e2e.team(home, "status"))["exchanges"]
    return [(e["id"], e["state"], e["from"], e["to"], e["text"], e["answer"]) for e in exchanges]


def _start(monkeypatch: pytest.MonkeyPatch, home: Path, limits: dict[str, int]) -> e2e.Daemon:
    monkeypatch.setattr(e2e, "LIMITS", limits)
    daemon = e2e.Daemon(home)
    daemon.start()
    return daemon


def test_a_team_over_lowered_limits_keeps_all_it_holds_and_refuses_only_new_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Seed: "Exhaustion is an explicit error naming the bound, never silent loss" — lowering a bound at a
    restart must not make a team `corrupt_state`: it keeps and replays everything, refuses new work of the
    kind that is over with the usual `bound_exceeded`, still takes other work, and `doctor` says what is
    over which limit."""
    home = tmp_path / "home"
    daemon = _start(monkeypatch, home, FILLED)
    try:
        info = homes.read_daemon_info(home)
        assert info is not None
        here = info["machineId"]
        members = [{"machineId": here, "agentId": name, "name": name} for name in ("alice", "bob", "carol")]
        (tmp_path / "team.json").write_text(json.dumps({"id": "t1", "name": "Build", "members": members}))
        e2e.ok(e2e.cli(home, "team", "--home", str(home), "create", "--file", str(tmp_path / "team.json")))
        alice = e2e.ok(e2e.team(home, "key", "alice"))["memberKey"]
        bob = e2e.ok(e2e.team(home, "key", "bob"))["memberKey"]
        asked = [e2e.ok(e2e.team(home, "ask", "bob", f"question {n}", key=alice))["id"] for n in range(3)]
        asked.append(e2e.ok(e2e.team(home, "ask", "alice", "and mine", key=bob))["id"])
        held = _held(home)
    finally:
        daemon.terminate()

    daemon = _start(monkeypatch, home, LOWERED)
    try:
        assert _held(home) == held  # replayed whole, not corrupt_state
        refused = e2e.error(e2e.team(home, "ask", "carol", "one more", key=alice), 1, "bound_exceeded")
        assert "exchanges" in refused["detail"]
        (tmp_path / "dave.json").write_text(json.dumps({"machineId": here, "agentId": "d", "name": "dave"}))
        added = e2e.error(e2e.team(home, "add", "--file", str(tmp_path / "dave.json")), 1, "bound_exceeded")
        assert "memberships" in added["detail"]
        mine = e2e.error(e2e.team(home, "ask", "carol", "and another", key=alice), 1, "bound_exceeded")
        assert "exchanges" in mine["detail"]  # the first bound that bites, checked before pending
        # Other work goes on: bob answers one of alice's three open questions (two stay, still over 1).
        e2e.ok(e2e.team(home, "reply", asked[0], "done", key=bob))
        status = e2e.ok(e2e.team(home, "status"))
        assert len(status["exchanges"]) == 4 and status["exchanges"][0]["state"] == "answered"

        report = e2e.ok(e2e.cli(home, "doctor", "--home", str(home)))
        over = {
            (row["teamId"], row["bound"]): (row["use"], row["limit"])
            for row in report["daemon"]["overLimits"]
        }
        assert over == {
            ("t1", "memberships"): (3, 2),
            ("t1", "exchanges"): (4, 3),
            ("t1", "pending_per_sender"): (2, 1),
        }
        assert report["ok"] is True  # over a limit is not damage
        status, readable, _ = e2e.human("doctor", "--home", str(home))
        assert status == 0 and "team t1 is over exchanges: 4/3; new work of that kind is refused" in readable
        after_reply = _held(home)
    finally:
        err = daemon.terminate()
    assert "corrupt_state" not in err and "invariant" not in err, err

    daemon = _start(monkeypatch, home, LOWERED)
    try:
        assert _held(home) == after_reply  # and it replays again under the same limits
    finally:
        daemon.terminate()


def test_an_inherited_excess_is_not_a_broken_invariant_but_a_grown_one_is() -> None:
    """T1 as a step sees it: a team over a lowered bound is not corrupt (the driver checks every step
    against the lowered limits); a step that takes it further over is still a violation."""
    driver = Driver(limits=Limits(pending_per_sender=3)).create(3)
    for n in range(3):
        driver.ask(f"q{n}", 1, 2)
    driver.limits = Limits(pending_per_sender=1)
    driver.reply("q0", 2)  # 3 open -> 2 open: still over the lowered bound, not grown: no violation
    driver.fails(
        c.Ask(driver.tick(), TEAM, "q8", "mem2", "more", member_key="key1"), ErrorCode.BOUND_EXCEEDED
    )
    before = driver.ledger
    grown = c.Ask(driver.tick(), TEAM, "q9", "mem2", "more", member_key="key1")
    sneaked = step(before, grown, Limits(pending_per_sender=3))  # as a reducer that forgot the bound would
    assert isinstance(sneaked, Accepted)
    assert step_violations(before, grown, sneaked, Limits(pending_per_sender=1)) == [
        ("T1", "'mem1' has 3 open questions")
    ]


def test_a_desk_replays_what_it_took_under_higher_limits() -> None:
    """The machine's delivery desk too: records and queued notices taken under a higher
    `delivery_records`/`queued_per_agent` replay whole under lower ones (before, the whole desk stopped
    as corrupt); only a new notice is refused."""
    submits = [
        d.Submit(n, "t1", f"t1/q{n}/question", NoticeKind.QUESTION, f"q{n}", "m1", "here", "a1", 10**9, "hi")
        for n in range(10, 13)
    ]
    entries = tuple(Entry(seq, desk_command_to_json(command)) for seq, command in enumerate(submits, 1))
    lowered = Limits(delivery_records=2, queued_per_agent=1)
    desk = replay_desk("here", Recovery(0, None, entries), lowered)
    assert [desk.notices[s.notice_id].state for s in submits] == [d.DeliveryState.QUEUED] * 3
    more = attrs.evolve(submits[0], at=20, notice_id="t1/q9/question", subject_id="q9")
    refused = d.step(desk, more, lowered)
    assert isinstance(refused, Rejected) and refused.bound == "delivery_records"
