# What a notice says about who wrote it (issue 16, item 8): the terminal text of an answer's continuation is
# rendered from the ledger's attribution: an owner's reply on a member's behalf never reads as the member's.
from __future__ import annotations

from harness.core import commands as c
from harness.core import effects as fx
from harness.core.records import NoticeKind
from harness.core.system import render_notice
from tests.team_helpers import TEAM, Driver


def _answer_notice(driver: Driver, question_id: str) -> str:
    exchange = driver.ledger.teams[TEAM].exchanges[question_id]
    asker = driver.ledger.teams[TEAM].members[exchange.from_]
    notice = fx.SubmitNotice(
        TEAM,
        fx.notice_id(TEAM, question_id, NoticeKind.ANSWER),
        NoticeKind.ANSWER,
        question_id,
        asker.id,
        asker.machine_id,
        asker.agent_id,
        10**9,
    )
    return render_notice(driver.ledger, notice)


def test_an_owner_reply_is_attributed_to_the_user_in_the_askers_terminal() -> None:
    """Seed: "An owner reply also names `memberId` and is attributed to the user." The asker's terminal said
    "bob answered your question" for an answer bob never wrote; it now names the user, and for whom."""
    driver = Driver().create()
    driver.ask("q1", 1, 2)
    driver.ok(c.Reply(driver.tick(), TEAM, "q1", "GET /state", member_id="mem2"))
    text = _answer_notice(driver, "q1")
    assert text.startswith("[team Build Harness] the user (for agent-2) answered your question q1:\n")


def test_a_members_own_reply_is_attributed_to_the_member() -> None:
    driver = Driver().create()
    driver.ask("q1", 1, 2)
    driver.reply("q1", 2)
    expected = "[team Build Harness] agent-2 answered your question q1:\n"
    assert _answer_notice(driver, "q1").startswith(expected)
