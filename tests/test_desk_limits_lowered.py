# Issue 16 item 12, "limits never corrupt a team", for the machine's delivery desk: a real daemon checking
# its invariants (HARNESS_CHECK_INVARIANTS=1) whose desk holds more than its restart's lower
# `delivery_records`, `queued_per_agent` and `notice_bytes`. Before, D9 flagged the inherited excess on the
# desk's first step after the restart and the desk stopped as corrupt_state.
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from harness.core import delivery as d
from harness.core.outcome import Accepted
from harness.core.records import NoticeKind
from harness.core.team import REINTRODUCED
from harness.io import home as homes
from harness.io.daemon import CHECK_ENV
from harness.io.desk_runner import desk_events
from tests import test_cli_e2e as e2e

FILLED = {**e2e.LIMITS, "queuedPerAgent": 8, "deliveryRecords": 20}
LOWERED = {**e2e.LIMITS, "queuedPerAgent": 1, "deliveryRecords": 2, "noticeBytes": 1024}


def _start(monkeypatch: pytest.MonkeyPatch, home: Path, limits: dict[str, int]) -> e2e.Daemon:
    monkeypatch.setattr(e2e, "LIMITS", limits)
    daemon = e2e.Daemon(home)
    daemon.start()
    return daemon


def _deliveries(home: Path) -> dict[str, Any]:
    return {e["text"]: e["delivery"] for e in e2e.ok(e2e.team(home, "status"))["exchanges"]}


def test_a_desk_over_lowered_limits_keeps_running_under_invariant_checks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Seed: "Exhaustion is an explicit error naming the bound, never silent loss" — a desk restarted with
    lower delivery bounds than it holds keeps every notice as it was, refuses a new notice with the bound as
    its reason, and no invariant check stops it (an inherited excess is held, not broken)."""
    monkeypatch.setenv(CHECK_ENV, "1")
    home = tmp_path / "home"
    daemon = _start(monkeypatch, home, FILLED)
    try:
        info = homes.read_daemon_info(home)
        assert info is not None
        here = info["machineId"]
        members = [{"machineId": here, "agentId": n, "name": n} for n in ("alice", "bob", "carol")]
        (tmp_path / "team.json").write_text(json.dumps({"id": "t1", "name": "Build", "members": members}))
        e2e.ok(e2e.cli(home, "team", "--home", str(home), "create", "--file", str(tmp_path / "team.json")))
        alice = e2e.ok(e2e.team(home, "key", "alice"))["memberKey"]
        bob = e2e.ok(e2e.team(home, "key", "bob"))["memberKey"]
        for n in range(3):  # bob's terminal is not attached: his introduction and three questions wait
            e2e.ok(e2e.team(home, "ask", "bob", f"question {n}", key=alice))
        held = _deliveries(home)
        assert [view["state"] for view in held.values()] == ["queued"] * 3
    finally:
        err = daemon.terminate()
    assert "invariant" not in err, err

    daemon = _start(monkeypatch, home, LOWERED)  # 6 records, 4 unsent for bob, introductions over 1 KiB
    try:
        e2e.ok(e2e.team(home, "ask", "carol", "one more", key=bob))  # the ledger takes it, the desk refuses
        deadline = time.monotonic() + 60
        while (view := _deliveries(home)["one more"]) is None or view["reason"] in ("pressure", "offline"):
            assert time.monotonic() < deadline, view
            time.sleep(0.1)
        assert (view["state"], view["reason"]) == ("rejected", "delivery_records")
        assert {text: view for text, view in _deliveries(home).items() if text != "one more"} == held
    finally:
        err = daemon.terminate()
    assert "invariant" not in err and "corrupt_state" not in err, err


# Issue 16 item 11's follow-up, beside the desk's other restart-time records: what the desk's trace says of a
# re-introduction (a fresh introduction when an agent attaches again).


def test_a_reintroduction_is_traced_with_its_membership_and_its_notice_id_apart() -> None:
    """A re-introduction's notice id is `TEAM/MEMBERSHIP~AT/introduction`; its trace event names the
    membership (`memberId`) and the notice (`noticeId`) separately. Before, `memberId` read `mem2~5000`."""
    again = f"t1/mem2{REINTRODUCED}5000/introduction"
    submits = (
        d.Submit(
            5000, "t1", again, NoticeKind.INTRODUCTION, "mem2", "mem2", "here", "a2", 10**9, "Welcome back"
        ),
        d.Submit(
            5001, "t1", "t1/q1/question", NoticeKind.QUESTION, "q1", "mem2", "here", "a2", 10**9, "Which?"
        ),
    )
    events = []
    desk = d.empty_desk("here")
    for submit in submits:
        outcome = d.step(desk, submit)
        assert isinstance(outcome, Accepted), outcome
        desk = outcome.state
        events += [event for _team, event in desk_events(desk, outcome.effects)]
    assert [(e["noticeId"], e["memberId"], e["kind"], e.get("exchangeId")) for e in events] == [
        (again, "mem2", "introduction", None),
        ("t1/q1/question", "mem2", "question", "q1"),
    ]
