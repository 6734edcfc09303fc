# Two machines and a lossy relay between them (models/link.py, scenario "two-machines-lossy-link"): the
# routing that splits one step into the owner's half and the remote desk's half (core/system.py), the link's
# bookkeeping, the link mutants caught with replayable traces the real protocol survives, and a broken
# protocol for each link property, so none of them holds vacuously. (The real protocol over the whole
# scenario runs in tests/test_models_scenarios.py; each mutant's search in tests/test_models.py.)
from __future__ import annotations

import attrs
import pytest

from harness.core import delivery as d
from harness.core.commands import CreateTeam, NewMember, RecordDelivery
from harness.core.errors import Rejected
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.records import NoticeKind
from harness.core.system import Action, Arrived, AtDesk, System, ToDesk, ToOwner, step_system
from harness.models import link as ln
from harness.models.checker import explore, replay
from harness.models.mutants import CAUGHT_BY, MUTANTS
from harness.models.scenarios import SCENARIOS, WorldModel
from harness.models.world import REAL, real_step_system

SCENARIO = "two-machines-lossy-link"
LINK_MUTANTS = sorted(name for name, scenario in CAUGHT_BY.items() if scenario == SCENARIO)
LIMITS = Limits()


# --- core/system.py: the two halves of a step --------------------------------------------------------------


def _create(remote: frozenset[str]) -> Accepted[System]:
    members = (
        NewMember("m0", "A", "a0", "zero", "peer", "k0"),
        NewMember("m1", "B", "a1", "one", "peer", "k1"),
    )
    created = step_system(System(remote=remote), CreateTeam(0, "t", "team", members), LIMITS)
    assert isinstance(created, Accepted)
    return created


def test_without_remote_machines_every_desk_is_stepped_in_the_same_step() -> None:
    created = _create(frozenset())
    assert set(created.state.desks) == {"A", "B"}
    assert not any(isinstance(effect, ToDesk | ToOwner) for effect in created.effects)
    team = created.state.ledger.teams["t"]
    assert team.members["m1"].introduction is not None, "B's report reached the owner in the same step"


def test_a_remote_desk_is_reached_through_the_link_and_reports_back_through_it() -> None:
    created = _create(frozenset({"B"}))
    sent = [effect for effect in created.effects if isinstance(effect, ToDesk)]
    assert [(e.machine_id, type(e.command)) for e in sent] == [("B", d.Submit)]
    assert set(created.state.desks) == {"A"}, "the remote desk has not heard of it yet"
    assert created.state.ledger.teams["t"].members["m1"].introduction is None

    arrived = step_system(created.state, Arrived("B", sent[0].command), LIMITS)
    assert isinstance(arrived, Accepted)
    reports = [effect for effect in arrived.effects if isinstance(effect, ToOwner)]
    assert [r.command.notice_id for r in reports] == [sent[0].command.notice_id]
    assert arrived.state.ledger == created.state.ledger, "the owner learns of it only when the report arrives"

    recorded = step_system(arrived.state, Arrived("B", reports[0].command), LIMITS)
    assert isinstance(recorded, Accepted)
    view = recorded.state.ledger.teams["t"].members["m1"].introduction
    assert view is not None and view.state == reports[0].command.state


def test_an_owner_request_addressed_to_a_remote_desk_leaves_and_an_arrival_is_never_rejected() -> None:
    system = _create(frozenset({"B"})).state
    read = AtDesk("B", d.InboxRead(5, ("t/m1/introduction",)))
    outcome = step_system(system, read, LIMITS)
    assert isinstance(outcome, Accepted) and not outcome.changed
    assert outcome.effects == (ToDesk("B", read.command),)
    # A submit the remote desk refuses is reported back as rejected, through the link.
    expired = d.Submit(50, "t", "t/q9/question", NoticeKind.QUESTION, "q9", "m1", "B", "a1", 10, "text")
    refused = step_system(system, Arrived("B", expired), LIMITS)
    assert isinstance(refused, Accepted)
    assert [type(e) for e in refused.effects] == [ToOwner]
    report = refused.effects[0]
    assert isinstance(report, ToOwner) and report.command.state == d.DeliveryState.REJECTED.value
    # A report the owner cannot place is an event, not a rejection of the arrival.
    stray = step_system(system, Arrived("B", RecordDelivery(5, "t", "t/q9/question", "queued")), LIMITS)
    assert isinstance(stray, Accepted) and not stray.changed


# --- the link's bookkeeping ---------------------------------------------------------------------------------


def _moves(link: ln.Link) -> dict[str, ln.Move]:
    return {move.label: move for move in ln.moves(link)}


def _command(n: int) -> RecordDelivery:
    return RecordDelivery(0, "t", f"t/q{n}/question", "queued")


def test_one_item_at_a_time_and_the_next_only_after_the_answer() -> None:
    link = ln.new_link(ln.LinkBounds("B", losses=0, retries=0, duplicates=0), ln.REAL_TRANSPORT)
    link = ln.enqueue(ln.enqueue(link, ln.UP, _command(1)), ln.UP, _command(2))
    assert [f.seq for f in link.flight] == [1], "the second waits for the first's answer"
    (move,) = ln.moves(link)
    assert move.arrived == (ln.UP, 1, _command(1))
    assert [(f.seq, f.attempt) for f in move.link.flight] == [(2, 1)]
    (last,) = ln.moves(move.link)
    assert last.link.drained and last.arrived is not None


def test_a_repeated_frame_is_refused_and_a_retry_is_answered_without_being_served_again() -> None:
    link = ln.new_link(ln.LinkBounds("B", losses=1, retries=1, duplicates=1, faults=3), ln.REAL_TRANSPORT)
    link = ln.enqueue(link, ln.DOWN, _command(1))
    frame = "down#1 attempt 1 (report t/q1/question queued)"
    repeated = _moves(link)[f"relay repeats {frame}"].link
    served = _moves(repeated)[f"relay hands over {frame}, and loses the answer"]
    assert served.arrived is not None
    assert [(f.seq, f.attempt) for f in served.link.flight] == [(1, 1)], "the repeated copy"
    replayed = _moves(served.link)[f"relay hands over {frame} (replay refused)"]
    assert replayed.arrived is None
    # Nothing of the item is left in flight and no answer came: attempt 2, with the same request id.
    assert [(f.seq, f.attempt) for f in replayed.link.flight] == [(1, 2)]
    retried = _moves(replayed.link)[
        "relay hands over down#1 attempt 2 (report t/q1/question queued) (answered from the cache)"
    ]
    assert retried.arrived is None and retried.link.drained
    assert retried.link.down.served == frozenset() and retried.link.down.opened == frozenset(), (
        "nothing can ask about the request any more, so the receiver's memory of it is gone"
    )


def test_a_receiver_that_forgets_serves_a_retry_twice() -> None:
    forgetful = ln.Transport(remembers_answered=False)
    link = ln.enqueue(ln.new_link(ln.LinkBounds("B"), forgetful), ln.DOWN, _command(1))
    frame = "down#1 attempt 1 (report t/q1/question queued)"
    retried = _moves(link)[
        "owner retries early (same request id) down#1 attempt 2 (report t/q1/question queued)"
    ]
    first = _moves(retried.link)[f"relay hands over {frame}"]
    again = _moves(first.link)["relay hands over down#1 attempt 2 (report t/q1/question queued)"]
    assert first.arrived is not None and again.arrived == first.arrived


# --- the scenario and its mutants ---------------------------------------------------------------------------


def test_the_link_mutants_have_only_the_link_scenario_to_be_caught_in() -> None:
    assert len(LINK_MUTANTS) >= 1
    for name in LINK_MUTANTS:
        assert MUTANTS[name].transport != REAL.transport and MUTANTS[name].step is REAL.step
    # Every other scenario is atomic between owner and desks: the transport's rules are never consulted.
    assert [name for name, model in SCENARIOS.items() if model.config.link is not None] == [SCENARIO]


@pytest.mark.parametrize("mutant", LINK_MUTANTS)
def test_a_link_mutant_is_caught_and_the_real_protocol_survives_its_trace(mutant: str) -> None:
    scenario = SCENARIOS[SCENARIO]
    broken = scenario.with_protocol(MUTANTS[mutant])
    result = explore(broken, broken.max_depth)
    assert result.violation is not None
    labels = result.violation.labels
    assert len(labels) <= 10, "a short trace: the flaw shows in a few steps"
    _states, violations = replay(broken, labels)
    assert result.violation.property in {name for name, _ in violations}
    states, violations = replay(scenario, labels)
    assert violations == [], "the real transport does no harm on the way"
    assert len(states) < len(labels) + 1, "the real transport never offers the mutant's whole trace"


def _replay(model: WorldModel, labels: list[str]) -> list[str]:
    states, violations = replay(model, labels)
    assert len(states) == len(labels) + 1, f"stopped after {states and len(states) - 1} steps"
    return [name for name, _ in violations]


def test_a_withdrawal_overtaking_its_submit_lets_the_notice_be_written() -> None:
    broken = SCENARIOS[SCENARIO].with_protocol(MUTANTS["send-before-answer"])
    labels = [
        "m0 asks m1 q0",
        "m0 cancels q0",
        "relay hands over down#2 attempt 1 (Withdraw t/q0/question)",
        "relay hands over down#1 attempt 1 (Submit t/q0/question)",
        "a1 takes t/q0/question",
    ]
    assert "no-write-after-withdrawal" in _replay(broken, labels)
    real = SCENARIOS[SCENARIO]
    asked_and_cancelled = replay(real, labels[:2])[0]
    assert len(asked_and_cancelled) == 3  # both steps taken
    assert "relay hands over down#2 attempt 1 (Withdraw t/q0/question)" not in {
        t.label for t in real.successors(asked_and_cancelled[-1])
    }, "the real owner sends the withdrawal only after the submit was answered"


def _drop_remote_reports(system: System, action: Action, limits: Limits) -> Accepted[System] | Rejected:
    """The owner takes in no report from a remote desk."""
    if isinstance(action, Arrived) and isinstance(action.command, RecordDelivery):
        return Accepted(system, None, changed=False)
    return real_step_system(system, action, limits)


def test_an_owner_deaf_to_remote_reports_disagrees_with_the_desk_once_the_link_drains() -> None:
    deaf = SCENARIOS[SCENARIO].with_protocol(attrs.evolve(REAL, name="deaf", step=_drop_remote_reports))
    labels = [
        "m0 asks m1 q0",
        "relay hands over down#1 attempt 1 (Submit t/q0/question)",
        "relay hands over up#1 attempt 1 (report t/q0/question queued (unobserved))",
    ]
    states, violations = replay(deaf, labels)
    assert violations == [] and states[-1].link is not None and states[-1].link.drained
    assert {name for name, _ in deaf.eventually(states[-1])} == {"owner-agrees-with-remote-desk"}
    real = SCENARIOS[SCENARIO]
    states, _ = replay(real, labels)
    assert real.eventually(states[-1]) == []


def test_a_link_that_still_owes_is_not_a_final_state() -> None:
    model = SCENARIOS[SCENARIO]
    states, _ = replay(model, ["m0 asks m1 q0"])
    assert [name for name, _ in model.eventually(states[-1])] == ["link-drains"]
