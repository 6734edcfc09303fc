# Two machines and a lossy relay between them (models/link.py, scenario "two-machines-lossy-link"): the
# routing that splits one step into the owner's half and the remote desk's half (core/system.py), the link's
# bookkeeping, the link mutants caught with replayable traces the real protocol survives, and a broken
# protocol for each link property, so none of them holds vacuously. Then the destination's grant and a
# hostile paired machine (models/hostile.py, scenario "two-machines-hostile-peer", issue 15): pairings renewed
# under frames in flight, the grant's refusals, and a broken grant for each of its properties. (The real
# protocol over the whole scenarios runs in tests/test_models_scenarios.py; each mutant's search in
# tests/test_models.py.)
from __future__ import annotations

import attrs
import pytest
from immutables import Map

from harness.core import delivery as d
from harness.core.commands import CreateTeam, NewMember, RecordDelivery
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.queries import delivery_view
from harness.core.records import NoticeKind
from harness.core.remote_grant import Grants, admit
from harness.core.system import Action, Arrived, AtDesk, System, ToDesk, ToOwner, step_system
from harness.core.values import replace
from harness.models import hostile as hs
from harness.models import link as ln
from harness.models.checker import explore, replay
from harness.models.mutants import CAUGHT_BY, MUTANTS
from harness.models.scenarios import SCENARIOS, WorldModel
from harness.models.world import HOSTILE_ALWAYS, REAL, World, real_step_system

SCENARIO = "two-machines-lossy-link"
HOSTILE = "two-machines-hostile-peer"
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
    linked = [name for name, model in SCENARIOS.items() if model.config.link is not None]
    assert linked == [SCENARIO, HOSTILE]


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
        "a1 takes t/q0/question",
        "relay hands over up#2 attempt 1 (report t/q0/question queued (ready))",
        "relay hands over up#3 attempt 1 (report t/q0/question writing)",
        "relay hands over up#4 attempt 1 (report t/q0/question delivered)",
        "relay hands over up#5 attempt 1 (report t/q0/question accepted)",
    ]  # (the owner's own first view is also queued/unobserved: only a later report can disagree)
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


# --- pairing again: frames of an earlier pairing ------------------------------------------------------------


def test_a_frame_kept_from_an_earlier_pairing_does_not_open_after_the_machines_pair_again() -> None:
    """spec/remote-v1.md 4.2: "Pairing the same two machines again starts fresh seal state and a new bond, so
    a frame of an earlier pairing, replayed by the relay, does not open (`forged`)"."""
    bounds = ln.LinkBounds("B", losses=0, retries=0, duplicates=1, faults=1, repairs=1)
    link = ln.enqueue(ln.new_link(bounds, ln.REAL_TRANSPORT), ln.DOWN, _command(1))
    frame = "down#1 attempt 1 (report t/q1/question queued)"
    repeated = _moves(link)[f"relay repeats {frame}"].link
    served = _moves(repeated)[f"relay hands over {frame}"]
    assert served.arrived is not None and not served.link.down.items
    repaired = _moves(served.link)["the machines pair again (bond 2)"].link
    assert repaired.down.opened == frozenset(), "fresh seal state: no replay window remembers the copy"
    old = _moves(repaired)[f"relay hands over {frame} (sealed under bond 1: does not open)"]
    assert old.arrived is None and old.link.drained


def test_a_retry_after_pairing_again_is_sealed_under_the_new_bond_and_served_once() -> None:
    bounds = ln.LinkBounds("B", losses=1, retries=0, duplicates=0, faults=1, repairs=1)
    link = ln.enqueue(ln.new_link(bounds, ln.REAL_TRANSPORT), ln.DOWN, _command(1))
    lost = _moves(link)[
        "relay hands over down#1 attempt 1 (report t/q1/question queued), and loses the answer"
    ]
    assert lost.arrived is not None
    repaired = _moves(lost.link)["the machines pair again (bond 2)"].link
    old = _moves(repaired)[
        "relay hands over down#1 attempt 2 (report t/q1/question queued) (sealed under bond 1: does not open)"
    ]
    assert [(f.attempt, f.bond) for f in old.link.flight] == [(3, 2)]
    again = _moves(old.link)[
        "relay hands over down#1 attempt 3 bond 2 (report t/q1/question queued) (answered from the cache)"
    ]
    assert again.arrived is None and again.link.drained


# --- the destination's grant and a hostile paired machine (issue 15) ----------------------------------------


def _after(model: WorldModel, world: World, *labels: str) -> World:
    for label in labels:
        world = next(t.state for t in model.successors(world) if t.label == label)
    return world


def _admit_anything(grants: Grants, **_where: object) -> Grants:
    """A destination with no grant at all: whatever a paired machine sends reaches the desk."""
    return grants


LAX = attrs.evolve(REAL, name="no-grant", admit=_admit_anything)
ASKED = ["m0 asks m1 q0", "relay hands over down#1 attempt 1 (Submit t/q0/question)"]


def test_finding_5_a_desk_that_admits_submits_outside_the_grant_is_caught_in_a_short_trace() -> None:
    """Issue 15, finding 5: "A sealed `delivery` submit for a team id that does not exist, addressed to an
    agent that shares no team with the sender, is pasted raw ... into that agent's terminal"."""
    scenario = SCENARIOS[HOSTILE]
    broken = scenario.with_protocol(MUTANTS["accept-out-of-grant-submit"])
    result = explore(broken, broken.max_depth)
    assert result.violation is not None and result.violation.property in HOSTILE_ALWAYS
    labels = result.violation.labels
    assert len(labels) <= 3 and labels[-1].startswith("mach2 sends mach1 ")
    states, violations = replay(scenario, labels)
    assert violations == [] and len(states) < len(labels) + 1, "the real grant refuses the hostile step"
    assert SCENARIOS[SCENARIO].config.hostile is None, "so only the hostile-peer scenario can catch it"


def test_a_peer_question_pasted_into_an_agent_its_team_never_introduced_is_seen() -> None:
    broken = SCENARIOS[HOSTILE].with_protocol(MUTANTS["accept-out-of-grant-submit"])
    labels = [
        "mach2 sends mach1 a question for a1 as h's member h9, never introduced",
        "a1 takes h/x1/question",
    ]
    assert _replay(broken, labels) == ["no-write-outside-grant"]
    states, _ = replay(SCENARIOS[HOSTILE], labels)
    assert len(states) == 1, "the real grant refuses it: nothing reaches the desk"


def test_a_peer_that_may_steer_the_owners_team_is_seen() -> None:
    lax = SCENARIOS[HOSTILE].with_protocol(LAX)
    assert "peer-cannot-steer-owner-notices" in _replay(lax, ["mach2 sends mach1 a hold of team t"])
    withdrawn = [*ASKED, "mach2 sends mach1 a withdrawal of t/q0/question"]
    assert "peer-cannot-steer-owner-notices" in _replay(lax, withdrawn)
    states, _ = replay(SCENARIOS[HOSTILE], withdrawn)
    assert len(states) == len(ASKED) + 1, "the real grant refuses the withdrawal"


def test_the_owners_requests_replayed_by_the_peer_as_its_own_are_refused() -> None:
    """The hostile machine re-sends what it saw on the relay (more than it could: it cannot open them)."""
    scenario = SCENARIOS[HOSTILE]
    world = _after(scenario, scenario.initial(), "m0 asks m1 q0")
    assert world.link is not None
    seen = [frame.command for frame in world.link.flight]
    target = hs.Target("mach1", "t", "m1", "a1", "q0")
    replays = [
        (label, c) for label, c in hs.attempts(hs.HostilePeer(), target, seen, 0, 1) if "owner's" in label
    ]
    assert [label for label, _ in replays] == [
        "mach2 sends mach1 the owner's Submit t/q0/question, as its own"
    ]
    for _label, command in replays:
        refused = admit(
            world.grants["mach1"],
            here="mach1",
            sender="mach2",
            command=command,
            owned_here=frozenset(),
        )
        assert isinstance(refused, Rejected) and refused.code is ErrorCode.CONFLICT
    assert replays[0][0] not in {t.label for t in scenario.successors(world)}
    # Without the grant, its copy lands first and is pasted in the owner's name.
    lax = scenario.with_protocol(LAX)
    labels = ["m0 asks m1 q0", replays[0][0], "a1 takes t/q0/question"]
    assert {"peer-cannot-steer-owner-notices", "no-write-outside-grant"} <= set(_replay(lax, labels))


def test_a_refused_owner_request_reaches_no_desk_and_its_submit_shows_rejected() -> None:
    """As io/remote.py answers a refused request: the desk never sees it and the owner's outbox item ends
    with the refusal, a submit shown `rejected` with the code; a retry gets the same answer from the cache.
    Here the grant binds team t to another machine (one that sent a notice of t before the owner did)."""
    scenario = SCENARIOS[HOSTILE]
    squatted = replace(scenario.initial(), grants=Map({"mach1": Grants(Map({"t": "mach2"}))}))
    asked = _after(scenario, squatted, "m0 asks m1 q0")

    def view(world: World) -> tuple[str, str | None] | None:
        seen = delivery_view(world.system.ledger.teams["t"], "t/q0/question")
        return None if seen is None else (seen.state, seen.reason)

    refused = _after(scenario, asked, "relay hands over down#1 attempt 1 (Submit t/q0/question)")
    assert "t/q0/question" not in refused.system.desks["mach1"].notices
    assert view(refused) == ("rejected", "conflict")
    lost = _after(
        scenario, asked, "relay hands over down#1 attempt 1 (Submit t/q0/question), and loses the answer"
    )
    assert view(lost) == ("queued", "unobserved")  # the owner's own first view: no answer came back
    cached = "(answered from the cache: refused conflict)"
    retried = _after(scenario, lost, f"relay hands over down#1 attempt 2 (Submit t/q0/question) {cached}")
    assert view(retried) == ("rejected", "conflict") and retried.link is not None and retried.link.drained
    assert "t/q0/question" not in retried.system.desks["mach1"].notices


def test_a_peer_within_its_grant_reaches_only_the_member_it_introduced() -> None:
    """Its grant: an agent registered here that it introduced into its own team gets its notices; their
    reports go back to it, never into the owner's ledger, and no property mistakes them for the owner's."""
    scenario = SCENARIOS[HOSTILE]
    config = attrs.evolve(scenario.config, hostile=hs.HostilePeer(own_member=True))
    model = attrs.evolve(scenario, config=config)
    labels = [
        "mach2 sends mach1 an introduction of a1 into h as h1",
        "mach2 sends mach1 a question for h's member h1 (a1)",
        "a1 takes h/h1/introduction",
        "clock moves to 2000",
        "a1 takes h/x4/question",
    ]
    states, violations = replay(model, labels)
    assert len(states) == len(labels) + 1 and violations == []
    final = states[-1]
    assert final.written["h/x4/question"] == 1 and final.grants["mach1"].owner("h") == "mach2"
    assert final.link is not None and final.link.drained, "h's reports went to mach2"
    assert model.eventually(final) == []
    result = explore(model, 5)
    assert result.violation is None and result.states > 1_000
