# Issue 19: behaviours of core/channels.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

import attrs

from harness.core.channels import CreateChannel, Observation, PaneAt, Setting, Window, plan
from harness.core.limits import Limits


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
