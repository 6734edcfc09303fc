# Small builders for team-ledger tests: a ledger driven step by step, with every step checked against the
# core invariants, so example tests read as the protocol story they tell.
from __future__ import annotations

from typing import Any

import attrs

from harness.core import commands as c
from harness.core.errors import ErrorCode, Rejected
from harness.core.invariants import check_step
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted
from harness.core.records import EMPTY_LEDGER, Exchange, Ledger, Team
from harness.core.team import step

TEAM = "t1"


def member(n: int, *, machine: str = "m-one") -> c.NewMember:
    return c.NewMember(f"mem{n}", machine, f"agent{n}", f"agent-{n}", f"role {n}", f"key{n}")


@attrs.define
class Driver:
    """Applies commands in order, checking T1-T14 after each, and keeps the latest ledger."""

    limits: Limits = DEFAULT_LIMITS
    ledger: Ledger = EMPTY_LEDGER
    now: int = 1_000
    last: Accepted[Ledger] | Rejected | None = None

    def run(self, command: Any) -> Accepted[Ledger] | Rejected:
        before = self.ledger
        outcome = step(before, command, self.limits)
        check_step(before, command, outcome, self.limits)
        if isinstance(outcome, Accepted):
            self.ledger = outcome.state
        else:
            assert self.ledger is before
        self.last = outcome
        return outcome

    def ok(self, command: Any) -> Accepted[Ledger]:
        outcome = self.run(command)
        assert isinstance(outcome, Accepted), outcome
        return outcome

    def fails(self, command: Any, code: ErrorCode, bound: str | None = None) -> Rejected:
        outcome = self.run(command)
        assert isinstance(outcome, Rejected), outcome
        assert outcome.code is code, outcome
        if bound is not None:
            assert outcome.bound == bound, outcome
        return outcome

    def tick(self, ms: int = 1) -> int:
        self.now += ms
        return self.now

    @property
    def team(self) -> Team:
        return self.ledger.teams[TEAM]

    def exchange(self, question_id: str) -> Exchange:
        return self.team.exchanges[question_id]

    def create(self, members: int = 3) -> Driver:
        self.ok(
            c.CreateTeam(self.now, TEAM, "Build Harness", tuple(member(n) for n in range(1, members + 1)))
        )
        return self

    def ask(self, qid: str, sender: int, to: int | str, text: str = "Which endpoint?", **kw: Any) -> Any:
        target = f"mem{to}" if isinstance(to, int) else to
        return self.run(c.Ask(self.tick(), TEAM, qid, target, text, member_key=f"key{sender}", **kw))

    def reply(self, qid: str, by: int, text: str = "GET /state", **kw: Any) -> Any:
        return self.run(c.Reply(self.tick(), TEAM, qid, text, member_key=f"key{by}", **kw))
