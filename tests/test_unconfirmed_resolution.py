# Issue 16, item 3: an `unconfirmed` notice is actionable. The owner asks the desk for evidence (a read of the
# agent's pane), then resolves it: landed confirms; lost permits exactly one more write under a new write id,
# and a second declared loss is refused. Through a real loopback daemon (the owner-only RPC and the CLI), with
# scripted terminals whose writes end uncertain and whose pane history the test writes.
from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from harness.core import delivery as d
from harness.core.records import NoticeKind
from harness.io.daemon import Daemon
from harness.io.desk_runner import EVIDENCE_CHARS, evidence_key, find_evidence
from harness.io.terminal_port import Licence, WriteOutcome
from tests.test_daemon import Api
from tests.test_desk_runner import FakeTerminals, S, desk_daemon, is_, local_team, until

BOB = "agent-bob"
DEADLINE = 60  # generous: the suite runs on a loaded two-core machine


def unconfirmed(daemon: Daemon) -> bool:
    """Bob's introduction reached its desk and its write ended unconfirmed."""
    assert daemon.desk is not None
    notices = daemon.desk.desk.notices.values()
    return any(n.agent_id == BOB and n.state is d.DeliveryState.UNCONFIRMED for n in notices)


class UncertainTerminals(FakeTerminals):
    """Writes that end `uncertain` (the submit never confirmed), over a pane history the test writes."""

    def __init__(self) -> None:
        super().__init__({"agent-alice": S.BUSY, BOB: S.IDLE})
        self.history: dict[str, str] = {}

    async def write(self, agent_id: str, text: str, licence: Licence | None = None) -> WriteOutcome:
        outcome = await super().write(agent_id, text, licence)
        return WriteOutcome.UNCERTAIN if outcome is WriteOutcome.OK else outcome

    async def transcript(self, agent_id: str) -> str | None:
        return self.history.get(agent_id, "")


def bob_intro(daemon: Daemon) -> d.Notice:
    assert daemon.desk is not None
    notices = daemon.desk.desk.notices.values()
    return next(n for n in notices if n.agent_id == BOB and n.kind is NoticeKind.INTRODUCTION)


async def cli(home: Path, *args: str) -> tuple[int, dict[str, object]]:
    command = [sys.executable, "-m", "harness.cli.main", "team", "--home", str(home), "--team", "t1"]
    with trio.fail_after(DEADLINE):
        done = await trio.run_process(
            [*command, "--json", *args], capture_stdout=True, capture_stderr=True, check=False
        )
    return done.returncode, json.loads(done.stdout or done.stderr)


async def test_the_owner_inspects_then_declares_a_loss_and_the_notice_is_written_once_more(
    tmp_path: Path,
) -> None:
    """Seed: "offline, unpaired, busy, draft, expired, cancelled, and uncertain states are visible and
    actionable"; "Delivery unconfirmed means it might have reached the terminal: inspect that member ...; do
    not invent a new ID and resend". The inspection is a read; only the owner's declared loss writes again,
    under the same notice id and a new write id, and never a third time."""
    fake = UncertainTerminals()
    async with desk_daemon(tmp_path, fake) as daemon:
        owner, keys = await local_team(daemon)
        await until(lambda: unconfirmed(daemon), DEADLINE)
        notice = bob_intro(daemon)
        assert len(fake.written_to(BOB)) == 1

        found = await owner("delivery_inspect", "t1", noticeId=notice.id)
        assert (found["found"], found["evidence"], found["writeId"]) == ("not_found", None, f"{notice.id}#1")
        assert found["state"] == "unconfirmed" and set(found["actions"]) == {"landed", "lost"}
        await trio.sleep(0.1)
        assert len(fake.written_to(BOB)) == 1 and bob_intro(daemon) == notice  # a read: nothing moved

        member = await Api.open(daemon, keys["bob"])
        for action, fields in (("delivery_inspect", {}), ("delivery_resolve", {"landed": False})):
            refused = await member.error(action, "t1", noticeId=notice.id, **fields)
            assert refused.code == "unauthorized"

        lost = await owner("delivery_resolve", "t1", noticeId=notice.id, landed=False)
        assert lost["writeId"] == f"{notice.id}#2" and lost["lostStartedAt"] == notice.started_at
        await until(lambda: len(fake.written_to(BOB)) == 2, DEADLINE)
        await until(lambda: unconfirmed(daemon), DEADLINE)
        assert fake.written_to(BOB)[1] == fake.written_to(BOB)[0]  # the same notice, not a new one

        again = await owner.error("delivery_resolve", "t1", noticeId=notice.id, landed=False)
        assert again.code == "conflict" and "never written a third time" in str(again)
        code, output = await cli(tmp_path, "resolve", notice.id, "--lost")
        assert code != 0 and output["error"] == "conflict"
        await trio.sleep(0.2)
        assert len(fake.written_to(BOB)) == 2  # never a third write

        code, output = await cli(tmp_path, "resolve", notice.id, "--landed")
        assert code == 0 and output["state"] == "delivered" and output["reason"] == "inspected"
        assert bob_intro(daemon).lost_at is not None  # the lost write stays on record


async def test_inspection_finds_the_notice_in_the_pane_history_and_escapes_what_it_shows(
    tmp_path: Path,
) -> None:
    """The evidence is the pane's own line: a hostile pane (escape sequences around the notice's line) is
    shown escaped on one line, never replayed into the owner's terminal."""
    fake = UncertainTerminals()
    async with desk_daemon(tmp_path, fake) as daemon:
        owner, keys = await local_team(daemon)
        await until(lambda: unconfirmed(daemon), DEADLINE)
        notice = bob_intro(daemon)
        first_line = notice.text.splitlines()[0]
        fake.history[BOB] = f"older output\n\x1b]0;owned\x07> {first_line} \x1b[31mred\x1b[0m\nmore\n"
        code, found = await cli(tmp_path, "inspect", notice.id)
        assert code == 0 and found["found"] == "landed"
        evidence = str(found["evidence"])
        assert first_line in evidence and "\x1b" not in evidence and "\x07" not in evidence
        assert len(evidence) <= EVIDENCE_CHARS and "\n" not in evidence

        code, refused = await cli(tmp_path, "resolve", notice.id)
        assert code != 0 and refused["error"] == "bad_request"
        code, refused = await cli(tmp_path, "inspect", "t1/nope/question")
        assert code != 0 and refused["error"] == "not_found"
        hostile = await owner.error("delivery_inspect", "t1", noticeId="\x1b]0;x\x07q")  # an escape as an id
        assert hostile.code == "not_found" and "\x1b" not in str(hostile)
        for landed in ("no", 0, None):  # only a JSON boolean declares anything
            refused = await owner.error("delivery_resolve", "t1", noticeId=notice.id, landed=landed)
            assert refused.code == "bad_request"
        other_team = await owner.error("delivery_resolve", "t1", noticeId="t2/q1/question", landed=False)
        assert other_team.code == "not_found"
        assert bob_intro(daemon).state is d.DeliveryState.UNCONFIRMED

        alice = await Api.open(daemon, keys["alice"])
        await alice("ask", "t1", id="q1", to="bob", text="Which port?")
        exchanges = lambda: daemon.durable.teams["t1"].exchanges  # noqa: E731
        await until(lambda: is_(exchanges()["q1"].delivery, "unconfirmed"), DEADLINE)
        checked = await owner("delivery_check", "t1", questionId="q1")
        assert checked["next"].startswith("inspect t1/q1/question")  # the state says what to do next
        code, found = await cli(tmp_path, "inspect", "q1")  # a question id names its question notice
        assert code == 0 and (found["noticeId"], found["found"]) == ("t1/q1/question", "not_found")


def test_evidence_is_the_notice_s_own_first_line_up_to_its_id() -> None:
    """A question notice is found by its first line up to its exchange id: another question's notice, or the
    asker's own mention of the id, is not evidence."""
    text = "[team demo] Question 2c9a4efb from alice:\nWhich port?\nAnswer with: reply 2c9a4efb 'answer'"
    notice = d.Notice(
        "t1/2c9a4efb/question", "t1", NoticeKind.QUESTION, "2c9a4efb", "m", "a", 10, text, 1, 0,
        d.DeliveryState.UNCONFIRMED, d.Reason.UNCERTAIN, 0, 1, 1,
    )  # fmt: skip
    assert evidence_key(notice) == "[team demo] Question 2c9a4efb"
    assert find_evidence("│ > [team demo]   Question\t2c9a4efb from alice: │", notice) is not None
    assert find_evidence("asked 2c9a4efb\n[team demo] Question 9999 from alice:", notice) is None
