# The checker's speed-ups change how fast it searches, never what it finds (issue 18, "a fast checker"): the
# hash-consed symmetry key folds exactly the worlds the reference serialization folds, also when its identity
# memo starts again; a search keyed by it reaches the same states and catches the same mutants with traces as
# short as the plain search; the link's memoized moves are the moves of the link in hand, and a search with
# them reaches what one without them reaches; the fingerprint's fields fold what canonical worlds fold; a
# board is spared its state invariants only when a step just found that very board clean; the memos of the
# hostile machine's requests and of the channel keeper's plans answer a mutant for itself; the step memo,
# keyed without the limits, answers only under the search's own; a search leaves no cyclic garbage for the
# collector it turns off; and `harness check --jobs` reports what one process reports, in catalogue order,
# stopping at the first violation.
from __future__ import annotations

import gc
import inspect
import json
from collections.abc import Hashable, Iterator
from typing import Any

import attrs
import pytest
from typer.testing import CliRunner

from harness.cli.app import app
from harness.core import channels as ch
from harness.core.board_invariants import board_violations
from harness.core.commands import RecordDelivery
from harness.core.errors import Rejected
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.records import Team
from harness.core.system import step_system
from harness.core.values import replace
from harness.models import link as ln
from harness.models.board_world import board_always, board_successors
from harness.models.channel_world import CHANNEL_SCENARIOS
from harness.models.checker import Result, Transition, explore
from harness.models.mutants import MUTANTS
from harness.models.scenarios import BOARD_SCENARIOS, SCENARIOS, WorldModel
from harness.models.symmetry import KeyTable, reference_key
from harness.models.world import (
    StepMemo,
    World,
    _planned_ask,
    canonical_fields,
    canonical_world,
    real_step_system,
)

RING = SCENARIOS["three-agents-ring"]
DEPTH = 5  # a few hundred worlds: every kind of step of the ring, cheap enough for the suite


class PlainKeyed(WorldModel):
    """The ring keyed by the reference serialization: the plain search the fast one must agree with."""

    def canonical(self, state: World) -> Hashable:
        return reference_key(canonical_world(state), self.symmetries)


def plain(model: WorldModel) -> PlainKeyed:
    return PlainKeyed(*(getattr(model, field.name) for field in attrs.fields(WorldModel)))


@attrs.frozen
class Recording:
    """A model that remembers every world the search keyed."""

    model: WorldModel
    seen: list[World] = attrs.field(factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def successors(self, state: World) -> Iterator[Transition[World]]:
        return self.model.successors(state)

    def canonical(self, state: World) -> Hashable:
        self.seen.append(state)
        return self.model.canonical(state)


def partition(keys: list[Hashable]) -> set[frozenset[int]]:
    """Which positions of `keys` share a key: the equivalence a key function draws, whatever its values."""
    classes: dict[Hashable, set[int]] = {}
    for position, key in enumerate(keys):
        classes.setdefault(key, set()).add(position)
    return {frozenset(members) for members in classes.values()}


@pytest.fixture(scope="module")
def ring_worlds() -> list[World]:
    recording = Recording(RING)
    explore(recording, DEPTH)  # type: ignore[arg-type]  # a Model by its methods
    return [canonical_world(world) for world in recording.seen]


@pytest.mark.parametrize("live_limit", [1 << 18, 7])
def test_the_fast_key_folds_exactly_what_the_reference_folds(
    ring_worlds: list[World], live_limit: int
) -> None:
    """A tiny identity memo starts again every few values: nodes stay interned, so keys must not change."""
    table = KeyTable(live_limit)
    fast = [table.key(world, RING.symmetries) for world in ring_worlds]
    reference = [reference_key(world, RING.symmetries) for world in ring_worlds]
    assert len(set(fast)) < len(ring_worlds), "rotations were folded (else this test shows nothing)"
    assert partition(fast) == partition(reference)


def test_a_world_keeps_its_key_after_its_parts_are_freed_and_their_addresses_reused() -> None:
    """The identity memo keeps what it remembers alive: a new object at a freed object's address must not
    be taken for it."""
    table = KeyTable()
    first = RING.initial()
    asked = next(iter(RING.successors(first))).state
    key_first = table.key(canonical_world(first), RING.symmetries)
    key_asked = table.key(canonical_world(asked), RING.symmetries)
    del first, asked
    for _ in range(3):  # rebuilt from scratch: fresh objects, likely at the freed addresses
        again = RING.initial()
        assert table.key(canonical_world(again), RING.symmetries) == key_first
        later = next(iter(RING.successors(again))).state
        assert table.key(canonical_world(later), RING.symmetries) == key_asked != key_first


def test_worlds_sharing_all_but_one_part_are_keyed_by_their_own_parts() -> None:
    """The views (screens, waiting, asked, system, a desk's notices) are remembered by their source's
    identity: a world that shares every other part with an earlier one must still be keyed by its own."""
    table = KeyTable()
    base = canonical_world(next(t.state for t in RING.successors(RING.initial()) if t.state.system.desks))
    desk_machine, desk = next(iter(base.system.desks.items()))
    quiet = replace(desk, sessions=type(desk.sessions)())
    variants = [
        base,
        replace(base, screens=(base.screens[1], *base.screens[:1], *base.screens[2:])),
        replace(base, screens=tuple(reversed(base.screens))),
        replace(base, asked=frozenset()),
        replace(base, system=replace(base.system, desks=base.system.desks.set(desk_machine, quiet))),
        base,
    ]
    fast = [table.key(world, RING.symmetries) for world in variants]
    reference = [reference_key(world, RING.symmetries) for world in variants]
    assert partition(fast) == partition(reference)
    assert len(set(fast)) > 2, "the variants differ (else this test shows nothing)"


@pytest.mark.parametrize("name", ["delivery-crash-restart", "two-machines-lossy-link"])
def test_the_fingerprint_fields_fold_exactly_what_canonical_worlds_fold(name: str) -> None:
    recording = Recording(SCENARIOS[name])
    explore(recording, 6)  # type: ignore[arg-type]  # a Model by its methods
    fields = [canonical_fields(world) for world in recording.seen]
    worlds = [canonical_world(world) for world in recording.seen]
    assert len(set(worlds)) < len(worlds), "some worlds were folded (else this test shows nothing)"
    assert partition(fields) == partition(worlds)  # type: ignore[arg-type]  # keys are hashable


def test_a_board_is_checked_unless_this_very_board_was_found_clean() -> None:
    """A step's invariants cover the board it made, so the search does not check that board again; any other
    board, one equal to it included, or that board under other limits, is checked in full."""
    model = BOARD_SCENARIOS["board-claim-race"]
    limits = model.config.limits
    after = next(iter(board_successors(model.initial(), model.config, model.protocol))).state.board
    assert board_always(after, limits) == [] == board_violations(after, limits)
    miscounted = replace(after, bytes=after.bytes + 1)
    assert [i for i, _ in board_always(miscounted, limits)] == ["B7"]
    twin = replace(after)  # equal, not the same board
    assert twin == after and twin is not after
    assert board_always(twin, limits) == board_violations(twin, limits)
    tight = replace(limits, tasks=0)
    assert board_always(after, tight) == board_violations(after, tight) != []


def test_a_mutant_grant_is_not_answered_from_the_real_grants_memo() -> None:
    """The hostile machine's admitted requests are memoized per grant function: after a search with the real
    grant, one with a grant that lets everything in must still see the requests the real one refused."""
    hostile = SCENARIOS["two-machines-hostile-peer"]
    assert explore(hostile, 3).violation is None
    broken = explore(hostile.with_protocol(MUTANTS["accept-out-of-grant-submit"]), 3)
    assert broken.violation is not None and broken.violation.labels[-1].startswith("mach2 sends mach1 ")


def _keeps_leavers(
    setting: ch.Setting, teams: dict[str, Team], observation: ch.Observation, limits: Limits
) -> tuple[ch.Operation, ...]:
    """A broken planner: panes that leave are never removed."""
    planned = ch.plan(setting, teams, observation, limits)
    return tuple(op for op in planned if not isinstance(op, ch.LeaveChannel))


def test_a_broken_planner_is_not_answered_from_the_real_planners_memo() -> None:
    """The channel world memoizes the keeper's plans per planner: after a search with the real planner has
    planned for every world within reach, a broken one still plans (and is caught) on its own."""
    model = CHANNEL_SCENARIOS["channel-member-leaves"]
    assert explore(model, 8).violation is None
    broken = explore(attrs.evolve(model, plan=_keeps_leavers), 8)
    assert broken.violation is not None and broken.violation.property == "one-tab"


def test_a_search_leaves_the_collectors_pace_as_it_was() -> None:
    usual = gc.get_threshold()
    explore(SCENARIOS["pause-resume-cancel"], 3)
    assert gc.get_threshold() == usual and gc.isenabled()


def counts(result: Result) -> tuple[int, int, int, int, bool]:
    return result.states, result.transitions, result.terminal_states, result.depth, result.complete


def test_the_optimised_search_reaches_the_states_of_the_plain_search() -> None:
    fast = explore(RING, DEPTH)
    slow = explore(plain(RING), DEPTH)
    assert fast.violation is None and slow.violation is None
    assert counts(fast) == counts(slow)


@pytest.mark.parametrize("mutant", ["forget-pending-count", "resume-on-late-answer"])
def test_mutants_are_caught_in_the_symmetric_scenario_as_by_the_plain_search(mutant: str) -> None:
    broken = RING.with_protocol(MUTANTS[mutant])
    fast = explore(broken, RING.max_depth)
    slow = explore(plain(broken), RING.max_depth)
    assert fast.violation is not None and slow.violation is not None
    assert fast.violation.property == slow.violation.property
    assert len(fast.violation.labels) == len(slow.violation.labels), "breadth-first: a shortest trace"


def test_memoized_link_moves_carry_the_commands_of_the_link_in_hand() -> None:
    """A frame compares without its command: two links equal by == may carry different requests in flight
    (a leftover copy of request id 1 from two different histories), and each must hand over its own."""
    first, second = (RecordDelivery(0, "t", f"t/q{n}/question", "queued") for n in (0, 1))
    one, other = (ln.Link(ln.REAL_TRANSPORT, flight=(ln.Frame(ln.UP, 1, 1, 1, c),)) for c in (first, second))
    assert one == other, "else this test shows nothing"
    assert ln.moves(one)[0].arrived == (ln.UP, 1, first)
    assert ln.moves(other)[0].arrived == (ln.UP, 1, second)


def test_the_search_with_memoized_link_moves_reaches_the_states_of_one_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    link_scenario = SCENARIOS["two-machines-lossy-link"]
    fast = explore(link_scenario, 6)
    monkeypatch.setattr(ln, "moves", lambda link: tuple(ln._moves(link)))
    slow = explore(link_scenario, 6)
    assert fast.violation is None and slow.violation is None
    assert counts(fast) == counts(slow) and fast.states > 1_000


def check(*argv: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(app, ["check", *argv, "--json"])
    return result.exit_code, json.loads(result.stdout)


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in {"seconds", "statesPerSecond", "peakRssMb"}}


def test_jobs_report_what_one_process_reports_in_catalogue_order() -> None:
    names = ["pause-resume-cancel", "three-agents-ring", "board-paging-reader", "two-agents-ask-each-other"]
    code_one, one = check(*names, "--max-depth", "4", "--jobs", "1")
    code_two, two = check(*names, "--max-depth", "4", "--jobs", "2")
    assert code_one == code_two == 0 and one["ok"] and two["ok"]
    assert [r["scenario"] for r in two["scenarios"]] == names
    assert [comparable(r) for r in two["scenarios"]] == [comparable(r) for r in one["scenarios"]]


def test_jobs_stop_at_the_first_violation_in_catalogue_order() -> None:
    """wait-deadlock would take minutes: its worker is stopped once the first scenario's violation is in."""
    code, document = check(
        "two-agents-ask-each-other", "wait-deadlock", "--mutant", "accept-non-addressee-reply", "--jobs", "2"
    )
    assert code == 1 and not document["ok"]
    assert [r["scenario"] for r in document["scenarios"]] == ["two-agents-ask-each-other"]
    assert document["scenarios"][0]["violation"]["property"] == "no-answer-by-non-addressee"


def test_jobs_below_one_is_refused() -> None:
    result = CliRunner().invoke(app, ["check", "pause-resume-cancel", "--jobs", "0"])
    assert result.exit_code == 2


@pytest.mark.parametrize("name", ["two-agents-ask-each-other", "wait-deadlock"])
def test_a_search_that_stops_memoizing_steps_reaches_what_one_that_keeps_them_reaches(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step memo stops keeping outcomes once a window finds too few of them there (StepMemo); the
    steps are the reducers' either way, so the search is the same search."""
    model = SCENARIOS[name]
    monkeypatch.setattr(StepMemo, "scenario", None)
    monkeypatch.setattr(StepMemo, "LEAST", 0)  # never stops keeping
    kept = explore(model, 8)
    assert StepMemo.keeping
    monkeypatch.setattr(StepMemo, "scenario", None)
    monkeypatch.setattr(StepMemo, "WINDOW", 100)
    monkeypatch.setattr(StepMemo, "LEAST", 101)  # stops after the first window
    dropped = explore(model, 8)
    assert not StepMemo.keeping
    assert kept.violation is None and dropped.violation is None
    assert counts(kept) == counts(dropped) and kept.states > 500


def test_a_mutant_stopped_memoizing_is_caught_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    model = SCENARIOS["two-agents-ask-each-other"].with_protocol(MUTANTS["accept-non-addressee-reply"])
    monkeypatch.setattr(StepMemo, "scenario", None)
    kept = explore(model, model.max_depth)
    monkeypatch.setattr(StepMemo, "scenario", None)
    monkeypatch.setattr(StepMemo, "WINDOW", 10)
    monkeypatch.setattr(StepMemo, "LEAST", 11)
    dropped = explore(model, model.max_depth)
    assert kept.violation is not None and dropped.violation is not None
    assert kept.violation.labels == dropped.violation.labels


def test_a_search_leaves_no_cyclic_garbage() -> None:
    """The collector is off while a search runs (checker._rare_collections): that is safe only while what a
    search drops is freed by reference counting alone, with nothing left in cycles."""
    model = SCENARIOS["two-agents-ask-each-other"]
    search = inspect.unwrap(explore)  # without the freeze at its end, which would hide garbage from collect
    gc.collect()
    gc.disable()
    try:
        result = search(model, model.max_depth)
        assert result.complete and result.violation is None
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_step_under_other_limits_than_the_searchs_is_not_answered_from_the_step_memo() -> None:
    """The step memo is keyed without the limits (StepMemo.limits are the search's): a step under other
    limits is the reducers' answer under those, even for a system and action the memo holds."""
    model = SCENARIOS["two-agents-ask-each-other"]
    explore(model, 3)
    world = model.initial()
    action = _planned_ask(model.config.asks[0], 0, world.now)
    tight = attrs.evolve(model.config.limits, ttl_min_ms=action.ttl_ms + 1)
    assert isinstance(real_step_system(world.system, action, model.config.limits), Accepted)
    assert real_step_system(world.system, action, tight) == step_system(world.system, action, tight)
    assert isinstance(step_system(world.system, action, tight), Rejected)
