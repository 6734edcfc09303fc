# Issue 19: behaviours of core/team.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

from harness.core import commands as c
from harness.core.effects import notice_id
from harness.core.errors import ErrorCode
from harness.core.limits import Limits
from harness.core.records import DeliveryView, NoticeKind
from tests.team_helpers import TEAM, Driver, member


def test_a_team_created_with_more_members_than_memberships_names_that_bound() -> None:
    """Seed: "Limit roster size"; exhaustion is an explicit bound_exceeded naming the bound."""
    d = Driver(limits=Limits(memberships=2))
    too_many = c.CreateTeam(d.tick(), TEAM, "T", tuple(member(n) for n in (1, 2, 3)))
    d.fails(too_many, ErrorCode.BOUND_EXCEEDED, "memberships")
    d.ok(c.CreateTeam(d.tick(), TEAM, "T", (member(1), member(2))))
    assert list(d.team.member_order) == ["mem1", "mem2"]


def test_an_introductions_repeated_delivery_report_changes_nothing() -> None:
    """Seed: "All clients reconstruct from daemon state and ignore older revisions": a desk repeating the
    state it already reported is no news, so the team's revision and the view's time stay as they were."""
    d = Driver().create(members=2)
    intro = notice_id(TEAM, "mem2", NoticeKind.INTRODUCTION)
    first = d.ok(c.RecordDelivery(d.tick(), TEAM, intro, "delivered"))
    assert first.changed
    revision, view = d.team.revision, d.team.members["mem2"].introduction
    again = d.ok(c.RecordDelivery(d.tick(), TEAM, intro, "delivered"))
    assert not again.changed
    assert d.team.revision == revision and d.team.members["mem2"].introduction == view
    moved = d.ok(c.RecordDelivery(d.tick(), TEAM, intro, "read", "inbox"))
    assert moved.changed and d.team.members["mem2"].introduction == DeliveryView("read", "inbox", d.now)
