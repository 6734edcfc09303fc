# The model checker over the team board: the real reducer holds every board invariant in every interleaving
# of the three board scenarios (exhausted, not bounded), each board mutant is caught in its scenario by the
# property it breaks, with a trace that replays, and the scenarios' stories go the way spec/board-v1.md says.
from __future__ import annotations

import pytest

from harness.core import board as b
from harness.models.board_world import BOARD_ALWAYS, PAGING, BoardWorld
from harness.models.checker import explore, replay
from harness.models.mutants import BOARD_CAUGHT_BY, BOARD_MUTANTS, CAUGHT_BY, MUTANTS
from harness.models.scenarios import BOARD_SCENARIOS, SCENARIOS

from .spec_tables import read_table


def test_board_registries_name_each_other_and_the_spec() -> None:
    assert set(BOARD_CAUGHT_BY) == set(BOARD_MUTANTS)
    assert {scenario for scenario, _ in BOARD_CAUGHT_BY.values()} == set(BOARD_SCENARIOS)
    assert not set(BOARD_SCENARIOS) & set(SCENARIOS), "one namespace for `harness check`"
    assert not set(BOARD_MUTANTS) & (set(MUTANTS) | set(CAUGHT_BY))
    assert list(BOARD_ALWAYS) == [row["id"] for row in read_table("board-v1.md", "invariants")]


@pytest.mark.parametrize("name", sorted(BOARD_SCENARIOS))
def test_the_real_board_holds_in_every_board_scenario(name: str) -> None:
    model = BOARD_SCENARIOS[name]
    result = explore(model, model.max_depth)
    print(
        f"\n{name}: {result.states} states, {result.transitions} transitions, depth {result.depth}, "
        f"{result.terminal_states} terminal, {result.seconds:.1f} s"
    )
    assert result.violation is None, result.violation
    assert result.complete, "every interleaving within the scenario's bounds is explored"
    assert result.states > 100 and result.terminal_states > 0


@pytest.mark.parametrize("mutant", sorted(BOARD_MUTANTS))
def test_each_board_mutant_is_caught_by_the_property_it_breaks(mutant: str) -> None:
    scenario, prop = BOARD_CAUGHT_BY[mutant]
    real = BOARD_SCENARIOS[scenario]
    broken = real.with_protocol(BOARD_MUTANTS[mutant])
    result = explore(broken, broken.max_depth)
    assert result.violation is not None, f"{mutant} went unnoticed in {scenario}"
    assert result.violation.property == prop, result.violation
    _states, violations = replay(broken, result.violation.labels)
    assert prop in {name for name, _ in violations}
    assert len(result.violation.steps) == len(result.violation.labels)
    _states, violations = replay(real, result.violation.labels)
    assert violations == [], "the real board does not break it on the same moves"


def test_a_stolen_claim_is_seen_by_the_claim_invariant_in_the_race() -> None:
    """Issue 20: "A claim cannot be stolen: only the claimant, or the owner explicitly, releases it." """
    broken = BOARD_SCENARIOS["board-claim-race"].with_protocol(BOARD_MUTANTS["steal-claim"])
    result = explore(broken, broken.max_depth)
    assert result.violation is not None
    assert result.violation.labels == ("m0 claims t1", "m1 claims t1")
    assert ("task t1", "ready by m0", "ready by m1") in result.violation.steps[1].changes


def _task(world: BoardWorld, task_id: str) -> b.Task:
    return world.board.tasks[task_id]


def test_the_claim_race_has_one_winner_until_an_explicit_release() -> None:
    model = BOARD_SCENARIOS["board-claim-race"]
    states, _ = replay(model, ["m0 claims t1", "m1 claims t1"])
    assert len(states) == 2 and _task(states[-1], "t1").claimant == "m0", "the second claim is refused"
    states, _ = replay(model, ["m2 claims t1"])
    assert len(states) == 1, "m2 does not hold dev, for which t1 is"
    states, _ = replay(model, ["m0 claims t1", "owner releases t1 naming m1"])
    assert len(states) == 2, "the owner releases only by naming the claimant"
    states, violations = replay(
        model, ["m0 claims t1", "m0 starts t1", "owner releases t1 naming m0", "m1 claims t1", "m1 starts t1"]
    )
    assert violations == [] and len(states) == 6
    t1 = _task(states[-1], "t1")
    assert (t1.state, t1.claimant) == (b.TaskState.IN_PROGRESS, "m1")


def test_the_chain_is_worked_only_in_dependency_order() -> None:
    """Seed 002: "Current derived dependency and member states must be consistent at each revision." """
    model = BOARD_SCENARIOS["board-dependency-chain"]
    states, _ = replay(model, ["m0 claims t3"])
    assert len(states) == 1, "t3 is pending while t2 is unfinished"
    done_t1 = ["m0 claims t1", "m0 starts t1", "m0 completes t1"]
    states, violations = replay(model, [*done_t1, "m1 claims t2", "m0 claims t3"])
    assert violations == [] and len(states) == 5, "t2 is claimable once t1 is done, t3 not yet"
    assert [_task(states[-1], t).state for t in ("t1", "t2", "t3")] == [
        b.TaskState.DONE,
        b.TaskState.READY,
        b.TaskState.PENDING,
    ]
    states, violations = replay(model, ["owner cancels t1"])
    assert violations == []
    assert [_task(states[-1], t).state for t in ("t2", "t3")] == [b.TaskState.BLOCKED, b.TaskState.BLOCKED]


def test_a_reader_following_next_offset_sees_notes_that_arrive_while_it_pages() -> None:
    """Seed 002: "Follow the returned nextOffset to retrieve later pages. When unreadOnly: true, returned
    notes leave the unread result set, so nextOffset intentionally remains at the current offset until that
    page is exhausted." """
    model = BOARD_SCENARIOS["board-paging-reader"]
    sent = ["s sends note1", "s sends note2", "s sends note3"]
    unread = [*sent, "r reads unread from 0", "s sends note4", "r reads unread from 0"]
    states, violations = replay(model, unread)
    assert violations == [] and len(states) == len(unread) + 1
    last = states[-1]
    assert last.paging is None, "the second page ended the pass"
    assert last.board.members["r"].unread == ()
    everything = [*sent, "r reads all from 0", "s sends note4", "r reads all from 2"]
    states, violations = replay(model, everything)
    assert violations == [] and len(states) == len(everything) + 1 and states[-1].paging is None


def test_a_skipped_unread_note_is_invisible_to_the_board_invariants_but_not_to_the_reader() -> None:
    """The mutant's boards are well formed: only the reader's property, which follows nextOffset the way the
    seed says a client must, notices that a note was never shown."""
    broken = BOARD_SCENARIOS["board-paging-reader"].with_protocol(BOARD_MUTANTS["advance-unread-offset"])
    result = explore(broken, broken.max_depth)
    assert result.violation is not None
    _states, violations = replay(broken, result.violation.labels)
    assert {name for name, _ in violations} == {PAGING}
    assert "note3" in result.violation.detail
