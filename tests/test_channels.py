# Tab channels without tmux (spec/channels-v1.md): the pure plan, applied with the real team reducer, in
# examples and under Hypothesis; the setting file and its hostile forms; the parse of tmux's pane list; the
# spec's refusal table; and the model-checker scenario with a broken planner it must catch.
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import channels as ch
from harness.core.commands import Ask, CreateTeam, NewMember
from harness.core.errors import ErrorCode, Rejected
from harness.core.invariants import ledger_violations
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.core.outcome import Accepted
from harness.core.records import Ledger, MembershipState, Team, TeamState
from harness.core.team import step
from harness.io import channel_setting
from harness.io import channels as io_channels
from harness.io.agents import AgentEntry, AgentRegistry, Engine, StartedBy, TmuxPane
from harness.io.channels import ChannelKeeper
from harness.io.rpc import Request
from harness.io.team_access import ActionError
from harness.models.channel_world import CHANNEL_SCENARIOS, ChannelModel
from harness.models.checker import explore, replay
from tests.spec_tables import read_table

ON = ch.Setting(True, 1)
WINDOWS = [ch.Window("sock", "$0", f"@{i}", f"work:{i}") for i in range(3)]
MACHINE = "mach"


def key_of(joiner: ch.Joiner) -> str:
    return f"k-{joiner.membership_id}"


def apply(ledger: Ledger, operations: tuple[ch.Operation, ...]) -> Ledger:
    """Every operation through the real reducer; each must be accepted."""
    for operation in operations:
        outcome = step(ledger, ch.command_of(operation, 0, MACHINE, key_of))
        assert isinstance(outcome, Accepted), (operation, outcome)
        ledger = outcome.state
    return ledger


def seen(where: dict[str, int], unseen: frozenset[str] = frozenset()) -> ch.Observation:
    return ch.Observation({agent: ch.PaneAt(agent, WINDOWS[w]) for agent, w in where.items()}, unseen)


def follow(ledger: Ledger, setting: ch.Setting, observation: ch.Observation) -> Ledger:
    ledger = apply(ledger, ch.plan(setting, ledger.teams, observation, DEFAULT_LIMITS))
    assert ch.plan(setting, ledger.teams, observation, DEFAULT_LIMITS) == ()  # a fixpoint
    return ledger


def active(team: Team) -> dict[str, str]:
    """agent id -> membership id of the team's active members."""
    return {m.agent_id: m.id for m in team.members.values() if m.state is MembershipState.ACTIVE}


def channel(setting: ch.Setting, window: int) -> str:
    return ch.channel_id(setting.epoch, WINDOWS[window])


# --- the plan -----------------------------------------------------------------------------------------------


def test_windows_that_come_and_go_never_take_the_owners_own_teams() -> None:
    """An adversarial review moved one agent pane through 101 new windows: 100 channel teams, and then the
    owner's `team create` was refused (`the owner already retains 100 teams`) until the daemon was stopped
    and each team exported and deleted. Channels hold at most half of the `teams` bound: a window past it
    gets no channel (named by `roomless`, logged by the keeper), the plan is still a fixpoint, and the owner
    creates its own teams in the other half."""
    limits = attrs.evolve(DEFAULT_LIMITS, teams=4)
    ledger = Ledger()
    for window in range(3):  # one agent, moved into a new window each time: each move leaves one more team
        observation = seen({"a": window})
        ledger = apply(ledger, ch.plan(ON, ledger.teams, observation, limits))
        assert ch.plan(ON, ledger.teams, observation, limits) == ()  # a fixpoint, with or without room
    assert sorted(ledger.teams) == sorted([channel(ON, 0), channel(ON, 1)])
    assert ch.roomless(ON, ledger.teams, seen({"a": 2}), limits) == (channel(ON, 2),)
    assert ch.roomless(ON, ledger.teams, seen({"a": 1}), limits) == ()  # a window that has its team
    assert ch.roomless(ch.OFF, ledger.teams, seen({"a": 2}), limits) == ()
    at_once = ch.plan(ON, {}, seen({"a": 0, "b": 1, "c": 2}), limits)  # three new windows in one look
    assert [op.team_id for op in at_once if isinstance(op, ch.CreateChannel)] == sorted(
        [channel(ON, 0), channel(ON, 1), channel(ON, 2)]
    )[:2]
    assert len(ch.roomless(ON, {}, seen({"a": 0, "b": 1, "c": 2}), limits)) == 1
    for n in (1, 2):
        own = CreateTeam(n, f"mine{n}", "by hand", (NewMember("m1", MACHINE, "a", "a", "", f"k{n}"),))
        created = step(ledger, own, limits)
        assert isinstance(created, Accepted), created
        ledger = created.state


def test_off_by_default_and_standalone_teams_are_never_touched() -> None:
    """Seed 000: "swarm collaboration is off by default"."""
    assert ch.Setting(enabled=False, epoch=0) == ch.OFF
    lone = step(
        Ledger(), CreateTeam(0, "standalone", "by hand", (NewMember("m1", MACHINE, "a", "a", "", "k"),))
    )
    assert isinstance(lone, Accepted)
    assert ch.plan(ch.OFF, lone.state.teams, seen({"a": 0, "b": 0}), DEFAULT_LIMITS) == ()
    ledger = follow(lone.state, ON, seen({"a": 0, "b": 0}))
    ledger = follow(ledger, ch.disabled_setting(ON), seen({"a": 0, "b": 0}))
    assert ledger.teams["standalone"] == lone.state.teams["standalone"]
    assert ledger.teams[channel(ON, 0)].state is TeamState.ARCHIVED


def test_three_panes_in_two_windows_form_two_channels_where_asks_stay() -> None:
    """Seed 000: "existing tab membership replaces manual team setup ... questions stay inside the tab"."""
    ledger = follow(Ledger(), ON, seen({"a": 0, "b": 0, "c": 1}))
    one, two = ledger.teams[channel(ON, 0)], ledger.teams[channel(ON, 1)]
    assert (set(active(one)), set(active(two))) == ({"a", "b"}, {"c"})
    assert (one.name, two.name) == ("tab work:0", "tab work:1")
    crossing = step(ledger, Ask(0, one.id, "q1", "c", "where?", member_key=f"k-{active(one)['a']}"))
    assert isinstance(crossing, Rejected) and crossing.code is ErrorCode.NOT_FOUND
    assert crossing.detail == f"no active member 'c' in team {one.id!r}"
    inside = step(ledger, Ask(0, one.id, "q2", "b", "which port?", member_key=f"k-{active(one)['a']}"))
    assert isinstance(inside, Accepted)


def test_a_pane_that_moves_leaves_before_it_joins_and_keeps_its_history() -> None:
    """Seed 000: "departure lets already-started exchanges finish"."""
    ledger = follow(Ledger(), ON, seen({"a": 0, "b": 0, "c": 1}))
    one = ledger.teams[channel(ON, 0)]
    first = active(one)["a"]
    asked = step(ledger, Ask(0, one.id, "q", "b", "which port?", member_key=f"k-{first}"))
    assert isinstance(asked, Accepted)
    operations = ch.plan(ON, asked.state.teams, seen({"a": 1, "b": 0, "c": 1}), DEFAULT_LIMITS)
    assert [type(op) for op in operations] == [ch.LeaveChannel, ch.JoinChannel]
    ledger = follow(asked.state, ON, seen({"a": 1, "b": 0, "c": 1}))
    one, two = ledger.teams[channel(ON, 0)], ledger.teams[channel(ON, 1)]
    assert one.exchanges["q"].from_ == first and one.members[first].state is MembershipState.REMOVED
    assert set(active(two)) == {"a", "c"}
    # Coming back is a new membership: the old one stays, removed and attributable.
    ledger = follow(ledger, ON, seen({"a": 0, "b": 0, "c": 1}))
    again = active(ledger.teams[channel(ON, 0)])["a"]
    assert again != first and again == ch.membership_id(channel(ON, 0), "a", 1)


def test_an_unseen_pane_keeps_its_membership_and_a_gone_one_leaves() -> None:
    ledger = follow(Ledger(), ON, seen({"a": 0, "b": 0}))
    kept = follow(ledger, ON, seen({"b": 0}, frozenset({"a"})))
    assert set(active(kept.teams[channel(ON, 0)])) == {"a", "b"}
    gone = follow(ledger, ON, seen({"b": 0}))
    assert set(active(gone.teams[channel(ON, 0)])) == {"b"}


def test_same_names_in_one_window_are_told_apart() -> None:
    observation = ch.Observation({"a1": ch.PaneAt("dev", WINDOWS[0]), "b2": ch.PaneAt("dev", WINDOWS[0])})
    ledger = follow(Ledger(), ON, observation)
    names = {m.name for m in ledger.teams[channel(ON, 0)].members.values()}
    assert names == {"dev", "dev-b2"}


def test_a_new_epoch_archives_the_old_channels_and_forms_new_ones() -> None:
    ledger = follow(Ledger(), ON, seen({"a": 0}))
    off = ch.disabled_setting(ON)
    ledger = follow(ledger, off, seen({"a": 0}))
    on_again = ch.enabled_setting(off)
    assert on_again == ch.Setting(True, 2) and ch.enabled_setting(on_again) == on_again
    ledger = follow(ledger, on_again, seen({"a": 0}))
    assert ledger.teams[channel(ON, 0)].state is TeamState.ARCHIVED
    assert set(active(ledger.teams[channel(on_again, 0)])) == {"a"}


def test_a_channel_archived_by_hand_is_not_reopened() -> None:
    ledger = follow(Ledger(), ON, seen({"a": 0}))
    ledger = apply(ledger, (ch.ArchiveChannel(channel(ON, 0)),))
    assert ch.plan(ON, ledger.teams, seen({"a": 0, "b": 0}), DEFAULT_LIMITS) == ()


def test_team_id_derivation_is_the_spec_s() -> None:
    digest = hashlib.sha256(b"sock\x00$0\x00@2").hexdigest()[:20]
    assert ch.channel_id(7, WINDOWS[2]) == f"tab:7:{digest}" and ch.epoch_of(f"tab:7:{digest}") == 7
    assert ch.epoch_of("standalone") is None and ch.epoch_of("tab:x:1") is None
    hostile = ch.Window("s", "$0", "@1", "evil\x1b]0;title\x07name\n")
    assert ch.channel_name(hostile) == "tab evil]0;titlename"


placements = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]), st.one_of(st.integers(0, 2), st.just(-1)), max_size=4
)
passes = st.lists(st.tuples(st.booleans(), placements), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(passes)
def test_channels_follow_any_sequence_of_looks(looks: list[tuple[bool, dict[str, int]]]) -> None:
    """Whatever the looks (panes in windows, gone, unseen: -1) and enables, applying each plan leaves exactly
    one channel membership per seen agent, in its window's team, keeps an unseen agent's memberships, never
    touches a standalone team, and keeps every team.v1 invariant."""
    lone = step(
        Ledger(), CreateTeam(0, "standalone", "by hand", (NewMember("m1", MACHINE, "a", "a", "", "k"),))
    )
    assert isinstance(lone, Accepted)
    ledger, setting = lone.state, ch.OFF
    for enable, placed in looks:
        setting = ch.enabled_setting(setting) if enable else ch.disabled_setting(setting)
        unseen = frozenset(agent for agent, w in placed.items() if w < 0)
        before = {t.id: active(t) for t in ledger.teams.values() if t.state is not TeamState.ARCHIVED}
        ledger = follow(ledger, setting, seen({a: w for a, w in placed.items() if w >= 0}, unseen))
        assert ledger_violations(ledger) == []
        assert ledger.teams["standalone"] == lone.state.teams["standalone"]
        channels = {t.id: t for t in ledger.teams.values() if ch.is_channel(t.id)}
        open_ = {t_id: t for t_id, t in channels.items() if t.state is not TeamState.ARCHIVED}
        if not setting.enabled:
            assert open_ == {}
            continue
        assert all(ch.epoch_of(t_id) == setting.epoch for t_id in open_)
        for agent, w in placed.items():
            homes = sorted(t_id for t_id, t in open_.items() if agent in active(t))
            if w >= 0:
                assert homes == [channel(setting, w)]
            else:
                was = sorted(t_id for t_id, members in before.items() if agent in members and t_id in open_)
                assert homes == was
        assert all(set(active(team)) <= set(placed) for team in open_.values())


# --- the setting and the look -------------------------------------------------------------------------------


def test_the_setting_round_trips_privately(tmp_path: Path) -> None:
    assert channel_setting.read_setting(tmp_path) == ch.OFF
    channel_setting.write_setting(tmp_path, ch.Setting(True, 3))
    assert channel_setting.read_setting(tmp_path) == ch.Setting(True, 3)
    assert stat.S_IMODE((tmp_path / channel_setting.SETTING_FILE).stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'{"version": 2, "enabled": true, "epoch": 1}',
        b'{"version": 1, "enabled": 1, "epoch": 1}',
        b'{"version": 1, "enabled": true, "epoch": -1}',
        b'{"version": 1, "enabled": true, "epoch": 1.5}',
        b'{"version": 1, "enabled": true, "epoch": 99999999999999999999}',
        b"[1, 2]",
        b'{"version": 1, "enabled": true, "epoch": 1, "pad": "' + b"x" * 5000 + b'"}',
        b"\xff\xfe",
    ],
)
def test_a_damaged_setting_is_refused_not_taken_for_off(tmp_path: Path, content: bytes) -> None:
    (tmp_path / channel_setting.SETTING_FILE).write_bytes(content)
    with pytest.raises(channel_setting.SettingError, match="is damaged"):
        channel_setting.read_setting(tmp_path)


def test_a_fifo_in_place_of_the_setting_does_not_block(tmp_path: Path) -> None:
    """Reproduces the attack: a reader that opened the path plainly would wait forever for a writer."""
    os.mkfifo(tmp_path / channel_setting.SETTING_FILE)
    with pytest.raises(channel_setting.SettingError, match="not a regular file"):
        channel_setting.read_setting(tmp_path)


def test_the_pane_list_parse() -> None:
    lines = [
        "%1\t0\t$0\t@1\t0\t0\tmy\tsession",  # a tab in the session name: it comes last, so it stays
        "%2\t1\t$0\t@1\t0\t1\tmy\tsession",  # dead: its program exited
        "%3\t0\t$1\t@2\t3\t0\tother",
        "%3\t0\t$2\t@2\t0\t0\tlinked",  # the same window linked into a second session: the first counts
        "garbage",
    ]
    found = io_channels._windows("sock", lines)
    assert found["%1"] == ch.Window("sock", "$0", "@1") and found["%1"].label == "my\tsession:0"
    assert found["my\tsession:0.0"] == found["%1"]
    assert "%2" not in found
    assert found["%3"].session_id == "$1"


def test_a_server_that_is_not_running_means_its_panes_left(tmp_path: Path) -> None:
    entry = AgentEntry(
        "a1",
        "alpha",
        Engine.CLAUDE,
        TmuxPane(f"harness-none-{os.getpid()}", "%1"),
        None,
        StartedBy.ATTACHED,
        0,
    )
    shell = attrs.evolve(entry, agent_id="a2", inbox_only=True)
    observation = trio.run(io_channels.observe, (entry, shell))
    assert observation == ch.Observation({}, frozenset())


# --- the spec and the model ---------------------------------------------------------------------------------


def test_refusal_table_equals_code() -> None:
    rows = read_table("channels-v1.md", "refusal-codes")
    assert [row["code"] for row in rows] == [refusal.value for refusal in ch.Refusal]


def test_the_channel_scenario_holds() -> None:
    """Seed 000: "departure lets already-started exchanges finish" and "questions stay inside the tab",
    over every interleaving (one move here; the shipped scenario allows two)."""
    model = CHANNEL_SCENARIOS["channel-member-leaves"]
    small = attrs.evolve(model, config=attrs.evolve(model.config, moves=1))
    result = explore(small, small.max_depth)
    assert result.violation is None and result.complete and result.terminal_states > 0


def _keeps_leavers(
    setting: ch.Setting, teams: dict[str, Team], observation: ch.Observation, limits: Limits
) -> tuple[ch.Operation, ...]:
    """A broken planner: panes that leave are never removed."""
    planned = ch.plan(setting, teams, observation, limits)
    return tuple(op for op in planned if not isinstance(op, ch.LeaveChannel))


def test_the_scenario_catches_a_planner_that_keeps_leavers() -> None:
    model = CHANNEL_SCENARIOS["channel-member-leaves"]
    broken: ChannelModel = attrs.evolve(model, plan=_keeps_leavers)
    result = explore(broken, broken.max_depth)
    assert result.violation is not None and result.violation.property == "one-tab"
    one = ch.channel_id(1, ch.Window("sock", "$0", "@0"))
    labels = [
        "keeper looks",
        f"keeper applies CreateChannel {one}",
        f"keeper applies CreateChannel {ch.channel_id(1, ch.Window('sock', '$0', '@1'))}",
        "a0 moves to window 1",
        "keeper looks",
        f"keeper applies JoinChannel {ch.channel_id(1, ch.Window('sock', '$0', '@1'))}",
        f"a1 asks a0 in {one}",  # accepted: a0 was never removed from the tab it left
    ]
    _states, violations = replay(broken, labels)
    assert "asks-stay-in-tab" in {name for name, _detail in violations}


# --- the keeper ---------------------------------------------------------------------------------------------


def _keeper(
    tmp_path: Path, ledger: Ledger, registry: AgentRegistry, refuse: bool
) -> tuple[ChannelKeeper, list[str], list[str]]:
    called: list[str] = []
    lines: list[str] = []

    async def act(request: Request) -> object:
        called.append(f"{request.action} {request.team_id}")
        if refuse:
            raise ActionError("bound_exceeded", "full", bound="memberships")
        return {}

    actions = {name: act for name in ("create", "add", "remove", "archive")}
    keeper = ChannelKeeper(
        tmp_path, MACHINE, registry, lambda: ledger, actions=actions, limits=DEFAULT_LIMITS, log=lines.append
    )
    return keeper, called, lines


def test_a_damaged_registry_is_not_a_machine_without_agents(tmp_path: Path) -> None:
    """Reproduces the hazard: an unreadable agents.json read as empty would remove every channel member."""
    channel_setting.write_setting(tmp_path, ON)
    ledger = follow(Ledger(), ON, seen({"a": 0, "b": 0}))
    damaged = AgentRegistry(tmp_path / "agents.json", {}, unavailable="agents.json is damaged")
    keeper, called, lines = _keeper(tmp_path, ledger, damaged, refuse=False)
    trio.run(keeper.sync)
    assert called == [] and len(lines) == 1 and "corrupt_state" in lines[0]
    channel_setting.write_setting(tmp_path, ch.disabled_setting(ON))  # disabling needs no registry
    trio.run(keeper.sync)
    assert called == [f"archive {channel(ON, 0)}"]


def test_a_refused_operation_is_logged_once_and_retried(tmp_path: Path) -> None:
    channel_setting.write_setting(tmp_path, ch.disabled_setting(ON))
    ledger = follow(Ledger(), ON, seen({"a": 0}))
    keeper, called, lines = _keeper(tmp_path, ledger, AgentRegistry(tmp_path / "agents.json"), refuse=True)
    trio.run(keeper.sync)
    trio.run(keeper.sync)
    assert called == [f"archive {channel(ON, 0)}"] * 2
    assert lines == [
        f"channels: apply_failed: ArchiveChannel {channel(ON, 0)}: bound_exceeded: full (bound memberships)"
    ]
