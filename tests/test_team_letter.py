# team.v1 to the letter: rules the seed's own words pin, told through the owner's ledger and its destination's
# desk together (core/system.py), since both rules here span the two: a wait breaks on questions the desk has
# not reported read, and a pause is a hold the desk keeps.
from __future__ import annotations

from typing import Any

import attrs
import pytest

from harness.core import commands as c
from harness.core import delivery as d
from harness.core.effects import SubmitNotice, notice_id
from harness.core.errors import ErrorCode as E
from harness.core.errors import Rejected
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.queries import WaitReason, decide_wait, inbox, was_read
from harness.core.records import Exchange, NoticeKind, QuestionState, Team
from harness.core.system import AtDesk, System, desk_command, inbox_read_action, step_system
from harness.core.team import restatement
from tests.team_helpers import TEAM, member

MACHINE = "m-one"  # every member of tests.team_helpers.member runs here


@attrs.define
class World:
    """The owner's ledger and its one destination desk, stepped together as the daemon routes them."""

    limits: Limits = attrs.field(factory=Limits)
    system: System = attrs.field(factory=System)
    now: int = 1_000

    def run(self, action: c.TeamCommand | AtDesk) -> Accepted[System] | Rejected:
        outcome = step_system(self.system, action, self.limits)
        if isinstance(outcome, Accepted):
            self.system = outcome.state
        return outcome

    def ok(self, action: c.TeamCommand | AtDesk) -> Any:
        outcome = self.run(action)
        assert isinstance(outcome, Accepted), outcome
        return outcome.result

    def tick(self, ms: int = 10) -> int:
        self.now += ms
        return self.now

    def create(self, members: int = 3) -> World:
        members_ = tuple(member(n) for n in range(1, members + 1))
        self.ok(c.CreateTeam(self.now, TEAM, "Build Harness", members_))
        return self

    def ask(self, qid: str, sender: int, to: int, **kw: Any) -> Accepted[System] | Rejected:
        text = "Which endpoint?"
        return self.run(c.Ask(self.tick(), TEAM, qid, f"mem{to}", text, member_key=f"key{sender}", **kw))

    def read_inbox(self, reader: int) -> tuple[str, ...]:
        """Member `reader` runs `inbox`: what it was shown, after its desk learnt of the read."""
        shown = tuple(e.id for e in inbox(self.team, self.team.members[f"mem{reader}"]).questions)
        action = inbox_read_action(self.system, TEAM, f"mem{reader}", self.tick())
        assert action is not None
        self.ok(action)
        return shown

    @property
    def team(self) -> Team:
        return self.system.ledger.teams[TEAM]

    def exchange(self, qid: str) -> Exchange:
        return self.team.exchanges[qid]

    def notice(self, qid: str, kind: NoticeKind = NoticeKind.QUESTION) -> d.Notice:
        return self.system.desks[MACHINE].notices[notice_id(TEAM, qid, kind)]


# --- item 6: a wait blocks until something new --------------------------------------------------------------


def test_a_question_read_before_the_wait_does_not_break_it() -> None:
    """Seed: "A bounded `wait` reads the ledger and inbox. Incoming questions break the wait so the agent can
    answer them". A question the waiter already read in its inbox is not incoming any more: waiting again
    blocks, instead of returning at once and inviting a polling loop."""
    w = World().create()
    w.ask("q1", 1, 2)
    assert w.read_inbox(2) == ("q1",)
    assert was_read(w.exchange("q1")), "the desk reported the read to the owner"
    own = w.ask("q2", 2, 3)
    assert isinstance(own, Accepted)
    since = w.tick()
    assert decide_wait(w.team, "mem2", w.exchange("q2"), since, since + 30_000, since=since) is None
    assert decide_wait(w.team, "mem2", w.exchange("q2"), since + 5, since + 30_000, since=since) is None


def test_a_question_that_arrives_during_the_wait_breaks_it_and_is_named() -> None:
    """Seed: "Incoming questions break the wait so the agent can answer them, avoiding mutual-wait
    deadlocks." The one that broke it is named; the ones it had read stay listed, but broke nothing."""
    w = World().create()
    w.ask("q1", 1, 2)
    w.read_inbox(2)
    w.ask("q2", 2, 3)
    since = w.tick()
    assert decide_wait(w.team, "mem2", w.exchange("q2"), since, since + 30_000, since=since) is None
    w.ask("q3", 3, 2)
    woke = decide_wait(w.team, "mem2", w.exchange("q2"), w.tick(), since + 30_000, since=since)
    assert woke is not None and woke.reason is WaitReason.INCOMING
    assert woke.news == ("q3",)
    assert {e.id for e in woke.incoming} == {"q1", "q3"}


def test_an_unread_question_from_before_the_wait_breaks_it_at_once() -> None:
    """Seed: "Incoming questions break the wait": one the waiter has never read is news to it, whenever it
    arrived, so two members that ask each other and wait both wake (no mutual-wait deadlock)."""
    w = World().create()
    w.ask("qa", 1, 2)
    w.ask("qb", 2, 1)
    assert w.notice("qa").state is d.DeliveryState.QUEUED and not was_read(w.exchange("qa"))
    since = w.tick(1_000)
    wake_1 = decide_wait(w.team, "mem1", w.exchange("qa"), since, since + 30_000, since=since)
    wake_2 = decide_wait(w.team, "mem2", w.exchange("qb"), since, since + 30_000, since=since)
    assert wake_1 is not None and (wake_1.reason, wake_1.news) == (WaitReason.INCOMING, ("qb",))
    assert wake_2 is not None and (wake_2.reason, wake_2.news) == (WaitReason.INCOMING, ("qa",))


def test_what_the_shell_already_showed_the_waiter_counts_as_read() -> None:
    """Seed: "Incoming questions break the wait so the agent can answer them." A wait that returned `incoming`
    showed the waiter those questions; before its desk's report reaches the owner, the shell passes their ids
    as `seen`, so the next wait blocks rather than waking on the same question again."""
    w = World().create()
    w.ask("q1", 1, 2)
    w.ask("q2", 2, 3)
    since = w.tick()
    first = decide_wait(w.team, "mem2", w.exchange("q2"), since, since + 30_000, since=since)
    assert first is not None and first.news == ("q1",)
    assert not was_read(w.exchange("q1")), "no report yet: only the shell knows it was shown"
    again = w.tick()
    shown = frozenset(e.id for e in first.incoming)
    assert (
        decide_wait(w.team, "mem2", w.exchange("q2"), again, again + 30_000, since=again, seen=shown) is None
    )


def test_a_question_that_arrived_since_the_wait_began_is_news_even_once_read() -> None:
    """Seed: "Incoming questions break the wait". One that arrived after the wait began breaks it even if the
    member read it elsewhere meanwhile (another shell's inbox): the wait does not know what that shell did."""
    w = World().create()
    w.ask("q2", 2, 3)
    since = w.tick()
    w.ask("q1", 1, 2)
    w.read_inbox(2)
    assert was_read(w.exchange("q1"))
    read = frozenset({"q1"})
    woke = decide_wait(w.team, "mem2", w.exchange("q2"), w.tick(), since + 30_000, since=since, seen=read)
    assert woke is not None and (woke.reason, woke.news) == (WaitReason.INCOMING, ("q1",))


def test_an_answer_still_wins_and_a_read_question_leaves_the_other_ends_visible() -> None:
    """Seed: "A bounded `wait` reads the ledger and inbox" and "Closing UI, timing out a poll ... do not
    cancel or resend work": with only read questions open, a wait ends by its question's own end or its
    timeout, never early."""
    w = World().create()
    w.ask("q1", 1, 2)
    w.read_inbox(2)
    w.ask("q2", 2, 3, ttl_ms=10_000)
    since = w.tick()
    timeout = decide_wait(w.team, "mem2", w.exchange("q2"), since + 30_000, since + 30_000, since=since)
    assert timeout is not None and timeout.reason is WaitReason.TIMEOUT and timeout.news == ()
    assert w.exchange("q2").state is QuestionState.OPEN, "a timeout never cancels"
    w.ok(c.Reply(w.tick(), TEAM, "q2", "GET /state", member_key="key3"))
    done = decide_wait(w.team, "mem2", w.exchange("q2"), w.tick(), since + 30_000, since=since)
    assert done is not None and done.reason is WaitReason.ANSWERED and done.news == ()


# --- item 7: pause holds; it does not refuse ----------------------------------------------------------------


def test_an_ask_to_a_paused_team_is_accepted_and_its_notice_held_until_resume() -> None:
    """Seed: "Pause holds new sends and withdraws queued terminal writes; resume only releases known-unsent
    work." An ask while paused is a new send: recorded, held at the desk, released by resume."""
    w = World().create()
    w.ok(c.PauseTeam(w.tick(), TEAM))
    asked = w.ask("q1", 1, 2)
    assert isinstance(asked, Accepted), asked
    assert w.exchange("q1").state is QuestionState.OPEN
    assert (w.notice("q1").state, w.notice("q1").reason) == (d.DeliveryState.HELD, d.Reason.PAUSED)
    view = w.exchange("q1").delivery
    assert view is not None and (view.state, view.reason) == ("held", "paused"), "the owner sees it held"
    w.ok(c.ResumeTeam(w.tick(), TEAM))
    assert w.notice("q1").state is d.DeliveryState.QUEUED, "resume releases the known-unsent notice"


def test_a_reply_in_a_paused_team_holds_its_continuation_until_resume() -> None:
    """Seed: "Pause holds new sends": the answer is recorded at once (only an explicit reply answers), and its
    continuation notice to the asker is held like any other send."""
    w = World().create()
    w.ask("q1", 1, 2)
    w.ok(c.PauseTeam(w.tick(), TEAM))
    assert w.notice("q1").state is d.DeliveryState.HELD
    w.ok(c.Reply(w.tick(), TEAM, "q1", "GET /state", member_key="key2"))
    assert w.exchange("q1").state is QuestionState.ANSWERED
    assert w.notice("q1", NoticeKind.ANSWER).state is d.DeliveryState.HELD
    w.ok(c.ResumeTeam(w.tick(), TEAM))
    assert w.notice("q1", NoticeKind.ANSWER).state is d.DeliveryState.QUEUED


@pytest.mark.parametrize(
    ("limits", "code", "bound"),
    [
        (Limits(pending_per_sender=1), E.BOUND_EXCEEDED, "pending_per_sender"),
        (Limits(asks_per_minute=1), E.RATE_LIMITED, None),
        (Limits(exchanges=1), E.BOUND_EXCEEDED, "exchanges"),
    ],
)
def test_bounds_still_apply_to_asks_in_a_paused_team(limits: Limits, code: E, bound: str | None) -> None:
    """Seed: "Limit roster size, text/evidence sizes, outstanding requests, and retained exchanges ... Pause
    holds new sends": holding a send does not lift a bound on it."""
    w = World(limits=limits).create()
    w.ok(c.PauseTeam(w.tick(), TEAM))
    assert isinstance(w.ask("q1", 1, 2), Accepted)
    refused = w.ask("q2", 1, 3)
    assert isinstance(refused, Rejected) and (refused.code, refused.bound) == (code, bound), refused
    assert "q2" not in w.team.exchanges


def test_a_restated_paused_team_holds_its_paused_asks_on_a_fresh_desk() -> None:
    """Seed: "A daemon restart never blindly repeats an uncertain terminal submission. Queued-but-unsent work
    can resume" and "Pause holds new sends": after a crash that lost the desk's copy, the restatement of a
    paused team tells the desk the hold before the question asked while paused, so it arrives held."""
    w = World().create()
    w.ok(c.PauseTeam(w.tick(), TEAM))
    w.ask("q1", 1, 2)
    desk = d.Desk(MACHINE)  # a desk that never heard of the team
    at = w.tick()
    for effect in restatement(w.team):
        if isinstance(effect, SubmitNotice) and effect.machine_id != MACHINE:
            continue
        stepped = d.step(desk, desk_command(w.system.ledger, effect, at, Limits()))
        assert isinstance(stepped, Accepted), stepped
        desk = stepped.state
    assert desk.notices[notice_id(TEAM, "q1", NoticeKind.QUESTION)].state is d.DeliveryState.HELD
