# Issue 21: a question ends with a visible reason. The owner's `expire` ends an open question `expired` with a
# reason as a deadline would (its notice withdrawn, never an answer), `cancel` may say why, the exchange keeps
# the reason in every view and the trace's `question_ended` carries it; a reason is a short token, set once.
# Over the reducer, the daemon's trace events, and a real daemon driven by the CLI as a person runs it.
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from harness.core import commands as c
from harness.core import effects as fx
from harness.core import invariants as ti
from harness.core.codec import command_from_json, command_to_json, exchange_view
from harness.core.errors import ErrorCode
from harness.core.outcome import Accepted
from harness.core.records import NoticeKind, QuestionState
from harness.io import home as homes
from harness.io.ledger_runner import ledger_events
from tests.team_helpers import TEAM, Driver
from tests.test_cli_e2e import Daemon, cli, error, human, ok, team
from tests.test_cli_e2e import daemon as daemon  # noqa: PLC0414  (the fixture, used by name)

E = ErrorCode
Q = QuestionState
# What a shell or a hostile member may send as a reason: each is refused before anything is looked up.
HOSTILE_REASONS = [
    "",
    "a" * 33,
    "No_answer",
    "no answer",
    "no_answer\n",
    "\x1b]0;owned\x07",
    "\x1b[2J",
    "ghp_" + "x" * 36,
    "$(reboot)",
    "r\u00e9ason",
    "no-answer",
    "\u2028",
    "no_answer\x00",
]


def asked(n_questions: int = 1) -> Driver:
    driver = Driver().create()
    for n in range(1, n_questions + 1):
        assert isinstance(driver.ask(f"q{n}", 1, 2), Accepted)
    return driver


def test_the_owners_expire_ends_an_open_question_like_its_deadline_with_a_reason() -> None:
    """Issue 21: "the question ends `expired` with reason `no_answer`, visible, never an invented answer"."""
    d = asked()
    out = d.ok(c.Expire(d.tick(), TEAM, "q1", "no_answer"))
    q1 = d.exchange("q1")
    assert (q1.state, q1.reason, q1.answer, q1.ended_at) == (Q.EXPIRED, "no_answer", None, d.now)
    assert out.events[0] == fx.QuestionEnded(TEAM, "q1", Q.EXPIRED)
    assert out.effects == (fx.WithdrawNotice(TEAM, fx.notice_id(TEAM, "q1", NoticeKind.QUESTION)),)
    assert d.team.open_deadlines == () and "mem1" not in d.team.pending_by_sender  # frees the asker's slot
    assert exchange_view(q1)["reason"] == "no_answer"
    # A reply after it is kept late: never an answer, never a continuation for the asker (T3, T7).
    late = d.reply("q1", 2)
    assert isinstance(late, Accepted) and not any(isinstance(e, fx.SubmitNotice) for e in late.effects)
    q1 = d.exchange("q1")
    assert (q1.state, q1.reason, q1.answer is not None and q1.answer.late) == (Q.EXPIRED, "no_answer", True)


def test_a_clock_expiry_and_a_plain_cancel_carry_no_reason() -> None:
    d = asked(2)
    d.ok(c.Cancel(d.tick(), TEAM, "q1", member_key="key1"))
    d.ok(c.Tick(d.tick(10 * 3_600_000), TEAM))
    assert [(d.exchange(q).state, d.exchange(q).reason) for q in ("q1", "q2")] == [
        (Q.CANCELLED, None),
        (Q.EXPIRED, None),
    ]


def test_a_cancel_says_why_by_the_asker_or_the_owner() -> None:
    d = asked(2)
    d.ok(c.Cancel(d.tick(), TEAM, "q1", member_key="key1", reason="changed_my_mind"))
    d.ok(c.Cancel(d.tick(), TEAM, "q2", reason="concluded"))
    assert [(d.exchange(q).state, d.exchange(q).reason) for q in ("q1", "q2")] == [
        (Q.CANCELLED, "changed_my_mind"),
        (Q.CANCELLED, "concluded"),
    ]


def test_a_reason_is_set_once_by_the_step_that_ended_the_question() -> None:
    d = asked(3)
    d.ok(c.Expire(d.tick(), TEAM, "q1", "no_answer"))
    again = d.ok(c.Expire(d.tick(), TEAM, "q1", "stopped"))
    assert not again.changed and d.exchange("q1").reason == "no_answer"
    d.fails(c.Cancel(d.tick(), TEAM, "q1", reason="stopped"), E.EXPIRED)  # a cancel of an expired one
    d.ok(c.Cancel(d.tick(), TEAM, "q2", reason="concluded"))
    assert not d.ok(c.Cancel(d.tick(), TEAM, "q2", reason="stopped")).changed
    assert not d.ok(c.Expire(d.tick(), TEAM, "q2", "no_answer")).changed
    assert (d.exchange("q2").state, d.exchange("q2").reason) == (Q.CANCELLED, "concluded")
    d.reply("q3", 2)
    assert not d.ok(c.Expire(d.tick(), TEAM, "q3", "no_answer")).changed  # an answer stands
    q3 = d.exchange("q3")
    assert (q3.state, q3.reason, q3.answer is not None and not q3.answer.late) == (Q.ANSWERED, None, True)


def test_expire_is_the_owners_alone() -> None:
    """Not even the asker may expire its own question: only the owner releases an asker."""
    d = asked()
    for key in ("key1", "key2", "key3", "not-a-key"):
        d.fails(c.Expire(d.tick(), TEAM, "q1", "no_answer", member_key=key), E.UNAUTHORIZED)
    assert d.exchange("q1").state is Q.OPEN


def test_expire_is_refused_in_an_archived_team_and_names_only_a_question_there_is() -> None:
    d = asked()
    d.fails(c.Expire(d.tick(), TEAM, "nope", "no_answer"), E.NOT_FOUND)
    d.fails(c.Expire(d.tick(), "t9", "q1", "no_answer"), E.NOT_FOUND)
    d.ok(c.ArchiveTeam(d.tick(), TEAM))
    d.fails(c.Expire(d.tick(), TEAM, "q1", "no_answer"), E.TEAM_ARCHIVED)


@pytest.mark.parametrize("reason", HOSTILE_REASONS, ids=repr)
def test_a_reason_that_is_not_a_short_token_is_refused(reason: str) -> None:
    """A reason reaches views, traces and terminals: only `[a-z_]{1,32}`, never free text (an escape sequence,
    a line break, a secret), refused before the question is looked up, so a member learns nothing of another
    pair's question from it."""
    d = asked()
    before = d.ledger
    d.fails(c.Expire(d.tick(), TEAM, "q1", reason), E.BAD_REQUEST)
    d.fails(c.Cancel(d.tick(), TEAM, "q1", member_key="key1", reason=reason), E.BAD_REQUEST)
    d.fails(c.Cancel(d.tick(), TEAM, "hidden", member_key="key3", reason=reason), E.BAD_REQUEST)
    assert d.ledger is before


def test_the_longest_reason_is_accepted() -> None:
    d = asked()
    d.ok(c.Cancel(d.tick(), TEAM, "q1", reason="z" * 32))
    assert d.exchange("q1").reason == "z" * 32


def test_expire_and_a_reasoned_cancel_survive_the_journal() -> None:
    for command in (
        c.Expire(5, TEAM, "q1", "no_answer"),
        c.Cancel(5, TEAM, "q1", member_key="k", reason="stopped"),
        c.Cancel(5, TEAM, "q1"),
    ):
        data = command_to_json(command)
        assert command_from_json(json.loads(json.dumps(data))) == command
    assert command_to_json(c.Expire(5, TEAM, "q1", "no_answer"))["type"] == "expire"
    refused = command_from_json({"type": "expire", "at": 5, "teamId": TEAM, "questionId": "q1"})
    assert not isinstance(refused, c.Expire)  # a journal entry without its reason is refused, not guessed


def test_a_changed_reason_of_an_ended_question_is_a_t12_violation() -> None:
    """T12 (spec/team-v1.md): an ended question never changes state or reason. The reducer cannot build the
    broken step, so it is built by hand; its valid neighbour keeps the reason."""
    d = asked()
    d.ok(c.Expire(d.tick(), TEAM, "q1", "no_answer"))
    command = c.Tick(d.tick(), TEAM)
    for reason, expected in (("no_answer", []), ("stopped", ["T12"]), (None, ["T12"])):
        team, changed = d.team, bool(expected)
        edited = attrs.evolve(team.exchanges["q1"], reason=reason)
        after = attrs.evolve(
            team, exchanges=team.exchanges.set("q1", edited), revision=team.revision + changed
        )
        ledger = attrs.evolve(d.ledger, teams=d.ledger.teams.set(TEAM, after))
        found = ti.step_violations(d.ledger, command, Accepted(ledger, changed=changed))
        assert [invariant for invariant, _ in found] == expected, found


def _ended_events(d: Driver, command: c.TeamCommand) -> list[dict[str, object]]:
    before = d.team
    d.ok(command)
    return [e for e in ledger_events(before, d.team, command) if e["type"] == "question_ended"]


def test_the_trace_says_why_a_question_ended() -> None:
    d = asked(4)
    assert _ended_events(d, c.Expire(d.tick(), TEAM, "q1", "no_answer")) == [
        {"type": "question_ended", "teamId": TEAM, "at": d.now, "exchangeId": "q1", "state": "expired",
         "reason": "no_answer"}
    ]  # fmt: skip
    [reasoned] = _ended_events(d, c.Cancel(d.tick(), TEAM, "q2", reason="adjourned"))
    assert (reasoned["state"], reasoned["reason"]) == ("cancelled", "adjourned")
    [plain] = _ended_events(d, c.Cancel(d.tick(), TEAM, "q3", member_key="key1"))
    assert plain["reason"] == "cancelled_by_asker"  # no reason given: the command names it, as before
    [by_clock] = _ended_events(d, c.Tick(d.tick(10 * 3_600_000), TEAM))
    assert by_clock["state"] == "expired" and "reason" not in by_clock


# --- the daemon, as a person and an agent run it ------------------------------------------------------------


def _team_of_two(daemon: Daemon, tmp_path: Path) -> tuple[Path, str]:
    home = daemon.home
    info = homes.read_daemon_info(home)
    assert info is not None
    members = [{"machineId": info["machineId"], "agentId": n, "name": n} for n in ("alice", "bob")]
    team_file = tmp_path / "team.json"
    team_file.write_text(json.dumps({"id": "t1", "name": "Build", "members": members}))
    ok(cli(home, "team", "--home", str(home), "create", "--file", str(team_file)))
    return home, ok(team(home, "key", "alice"))["memberKey"]


def test_team_expire_and_cancel_with_a_reason_through_the_daemon(daemon: Daemon, tmp_path: Path) -> None:
    home, alice = _team_of_two(daemon, tmp_path)
    for qid in ("q1", "q2", "q3"):
        ok(team(home, "ask", "bob", "Which endpoint?", "--id", qid, key=alice))
    # A member may not expire, not even its own question; the owner may, and every view shows why.
    error(team(home, "expire", "q1", "--reason", "no_answer", key=alice), 1, "unauthorized")
    expired = ok(team(home, "expire", "q1", "--reason", "no_answer"))
    assert (expired["state"], expired["reason"], expired["answer"]) == ("expired", "no_answer", None)
    cancelled = ok(team(home, "cancel", "q2", "--reason", "changed_my_mind", key=alice))
    assert (cancelled["state"], cancelled["reason"]) == ("cancelled", "changed_my_mind")
    shown = ok(team(home, "status", "q1", key=alice))
    assert (shown["state"], shown["reason"]) == ("expired", "no_answer")
    waited = ok(team(home, "wait", "q1", "--seconds", "0", key=alice))
    assert (waited["reason"], waited["exchange"]["reason"]) == ("expired", "no_answer")
    # A late reply is kept, never an answer.
    late = ok(team(home, "reply", "q1", "GET /state", key=ok(team(home, "key", "bob"))["memberKey"]))
    assert (late["state"], late["reason"], late["answer"]["late"]) == ("expired", "no_answer", True)
    # Expire without a reason, and hostile reasons: one line with a stable code, never a traceback.
    assert "--reason" in error(team(home, "expire", "q3"), 2, "bad_request")["detail"]
    base = ["team", "--home", str(home), "--team", "t1"]
    for reason in ("no answer", "\x1b[2J", "a" * 33, "ghp_" + "x" * 36):
        for action in ("expire", "cancel"):
            for json_out in ((), ("--json",)):
                status, out, err = human(*base, action, "q3", "--reason", reason, *json_out)
                assert status == 1, (action, reason, out, err)
                if json_out:
                    assert json.loads(out)["error"] == "bad_request" and err == "", (out, err)
                else:
                    assert err.startswith("harness: bad_request: ") and err.count("\n") == 1, err
                    assert out == ""
                assert reason not in out + err
    assert ok(team(home, "status", "q3"))["state"] == "open"
    exchanges: list[dict[str, Any]] = ok(team(home, "get"))["exchanges"]
    assert [(e["id"], e["reason"]) for e in exchanges] == [
        ("q1", "no_answer"),
        ("q2", "changed_my_mind"),
        ("q3", None),
    ]


def test_the_readable_status_says_why_a_question_ended(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --json, `team status ID` shows the reason beside the state (`expired, no_answer`)."""
    from harness.cli import output

    exchange = {"id": "q1", "from": "m1", "to": "m2", "state": "expired", "reason": "no_answer", "text": "hi"}
    output.show_exchange(exchange, output.Look(names={"m1": "alice", "m2": "bob"}))
    assert "alice -> bob  (expired, no_answer)" in capsys.readouterr().out
