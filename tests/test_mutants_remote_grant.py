# Issue 19: behaviours of core/remote_grant.py that scripts/mutate_core.py found no test pinned. `observable`
# decides which of this machine's teams a paired machine's owner may read; nothing exercised it in core.
from __future__ import annotations

from harness.core import commands as c
from harness.core import delivery as d
from harness.core.remote_grant import EMPTY_GRANTS, Grants, admit, observable
from tests.team_helpers import TEAM, Driver, member


def test_a_paired_machine_observes_only_teams_with_an_active_member_on_it() -> None:
    """Seed: "Standalone team membership is independent of pane visibility and can span paired machines."
    A team is readable from a paired machine while one of its active members lives there; a removed
    member's machine loses that view, and a machine with no member never had it."""
    d = Driver().create(members=2)
    d.ok(c.AddMember(d.tick(), "t1", member(3, machine="m-two")))
    assert observable(d.team, "m-one") is True
    assert observable(d.team, "m-two") is True
    assert observable(d.team, "m-three") is False
    d.ok(c.RemoveMember(d.tick(), TEAM, "mem3"))
    assert d.team.members["mem3"].machine_id == "m-two"
    assert observable(d.team, "m-two") is False
    assert observable(d.team, "m-one") is True


def test_the_owners_other_requests_and_a_second_hold_leave_the_grants_as_they_are() -> None:
    """Once a team's owner is bound, its hold, release and withdrawal of a notice change no grant (the branch
    that falls through to the grants unchanged); its archive frees the team's place (remote-v1)."""
    bound = admit(EMPTY_GRANTS, here="m-here", sender="m-owner", command=d.Hold(1, "t1"), owned_here=())
    assert isinstance(bound, Grants) and bound.owner("t1") == "m-owner"
    for command in (d.Hold(2, "t1"), d.Release(2, "t1")):
        again = admit(bound, here="m-here", sender="m-owner", command=command, owned_here=())
        assert again is bound, command
    archived = admit(bound, here="m-here", sender="m-owner", command=d.WithdrawTeam(2, "t1"), owned_here=())
    assert archived == EMPTY_GRANTS
