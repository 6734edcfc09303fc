# Issue 19: behaviours of core/channels.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

import hashlib

import attrs

from harness.core.channels import (
    CreateChannel,
    JoinChannel,
    LeaveChannel,
    Observation,
    PaneAt,
    Setting,
    Window,
    command_of,
    membership_id,
    plan,
)
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.records import Ledger
from harness.core.team import step


def test_a_clashing_name_keeps_one_character_when_the_suffix_fills_the_bound() -> None:
    """Names are unique among active members: the second `alice` of a window gets the start of its agent id,
    and when the name bound leaves no room beside that suffix, one character of the name is still kept."""
    window = Window("s", "$1", "@1", "main:0")
    observation = Observation(
        {"agent-one-xyz": PaneAt("alice", window), "agent-two-xyz": PaneAt("alice", window)}
    )
    limits = attrs.evolve(Limits(), name_chars=9)
    (create,) = plan(Setting(True, 1), {}, observation, limits)
    assert isinstance(create, CreateChannel)
    assert [member.name for member in create.members] == ["alice", "a-agent-tw"]


def test_a_name_clash_on_the_short_suffix_too_takes_the_whole_agent_id() -> None:
    window = Window("s", "$1", "@1", "main:0")
    ids = ["aaaa", "abcdefgh1", "abcdefgh2"]
    observation = Observation({agent_id: PaneAt("alice", window) for agent_id in ids})
    (create,) = plan(Setting(True, 1), {}, observation, Limits())
    assert isinstance(create, CreateChannel)
    assert [member.name for member in create.members] == ["alice", "alice-abcdefgh", "alice-abcdefgh2"]


def test_a_membership_id_is_the_specs_digest_of_team_agent_and_join_count() -> None:
    """spec/channels-v1.md: "Membership id of an agent's n-th membership (n from 0) of a team: the first 16
    hex digits of SHA-256 of `TEAM_ID/AGENT_ID/n`"; derived, so a retried join is the same one."""
    assert membership_id("tab:1:abc", "agent-a", 0) == hashlib.sha256(b"tab:1:abc/agent-a/0").hexdigest()[:16]
    assert membership_id("tab:1:abc", "agent-a", 1) != membership_id("tab:1:abc", "agent-a", 0)


def test_a_name_freed_by_a_member_leaving_in_the_same_pass_is_free_for_a_joiner() -> None:
    """Names are unique among the members who stay: when alice's pane leaves the window as another agent
    registered as alice arrives, the newcomer is plain alice, not alice with a suffix."""
    window = Window("s", "$1", "@1", "main:0")
    setting = Setting(True, 1)
    ledger = Ledger()
    (create,) = plan(setting, ledger.teams, Observation({"agent-one": PaneAt("alice", window)}), Limits())
    created = step(ledger, command_of(create, 0, "mach", lambda joiner: f"k-{joiner.membership_id}"))
    assert isinstance(created, Accepted), created
    ledger = created.state
    leave, join = plan(setting, ledger.teams, Observation({"agent-two": PaneAt("alice", window)}), Limits())
    assert isinstance(leave, LeaveChannel) and isinstance(join, JoinChannel)
    assert (join.member.agent_id, join.member.name) == ("agent-two", "alice")
