# The riding rule (core/riding.py) is what the daemon's desk decides by and what the model's machine crash
# loses: `step_system` keeps, beside the system, the journals as a machine crash would leave them, and the
# checker's `machine-crash-restart` scenario explores every crash point against them.
from __future__ import annotations

import attrs
from immutables import Map

from harness.core import delivery as d
from harness.core.commands import Ask, CreateTeam, NewMember
from harness.core.outcome import Accepted
from harness.core.queries import delivery_view
from harness.core.records import NoticeKind
from harness.core.riding import desk_step_rides, report_rides
from harness.core.system import AtDesk, Durable, System, start_reports, step_system
from harness.io.desk_runner import _unheeded
from harness.models.checker import explore, replay
from harness.models.mutants import CAUGHT_BY, MUTANTS
from harness.models.scenarios import SCENARIOS
from tests.test_daemon import SMALL

HOME = "mach0"
NOTICE = "t/q0/question"


def _step(system: System, *actions: object) -> System:
    for action in actions:
        outcome = step_system(system, action)  # type: ignore[arg-type]
        assert isinstance(outcome, Accepted), (action, outcome)
        system = outcome.state
    return system


def _asked(home: str = HOME) -> System:
    """A team of two on mach0 (their introductions already read), whose journals are durable so far, and m0's
    question to m1."""
    members = tuple(NewMember(f"m{i}", "mach0", f"a{i}", f"agent{i}", "peer", f"k{i}") for i in range(2))
    created = _step(System(), CreateTeam(0, "t", "model", members))
    read = d.InboxRead(0, ("t/m0/introduction", "t/m1/introduction"))
    ready = _step(created, AtDesk("mach0", read))
    durable = System(ready.ledger, ready.desks, durable=Durable(home, ready.ledger, ready.desks))
    return _step(durable, Ask(1, "t", "q0", "m1", "which port?", None, 10_000, member_key="k0"))


def test_the_ask_is_durable_and_what_the_owner_asks_of_its_own_desk_rides() -> None:
    """An accepted ask is durable before it is acknowledged; the submit it becomes at the desk on the owner's
    machine rides: the owner restates it at every start."""
    asked = _asked()
    assert asked.durable is not None
    assert "q0" in asked.durable.ledger.teams["t"].exchanges
    assert NOTICE in asked.desks[HOME].notices
    assert NOTICE not in asked.durable.desks[HOME].notices


def test_a_write_start_is_durable_and_its_end_and_turn_ride() -> None:
    """`write_started` is durable before the paste (it also makes the desk's riding steps before it durable);
    the end of the write and the turn after it ride."""
    asked = _asked()
    looked = _step(asked, AtDesk(HOME, d.Observe(2, "a1", d.Observed.IDLE)))
    assert looked.durable == asked.durable  # a look rides, and so does the desk's report of it
    view, kept = (delivery_view(s.teams["t"], NOTICE) for s in (looked.ledger, looked.durable.ledger))
    assert view is not None and kept is not None and (view.reason, kept.reason) == ("ready", "unobserved")
    started = _step(looked, AtDesk(HOME, d.WriteStarted(3, NOTICE, d.Observed.IDLE, 3)))
    assert started.durable is not None
    assert started.durable.desks[HOME] == started.desks[HOME]
    finished = _step(started, AtDesk(HOME, d.WriteFinished(4, NOTICE, d.WriteResult.OK)))
    turned = _step(finished, AtDesk(HOME, d.TurnObserved(5, NOTICE)))
    assert turned.desks[HOME].notices[NOTICE].state is d.DeliveryState.ACCEPTED
    assert turned.durable == started.durable


def test_a_desk_on_another_machine_rides_only_looks_that_report_nothing() -> None:
    """The owner's machine is `home`: a desk elsewhere hears of a team it does not own, and nothing restates
    to it when only that machine restarts, so the owner's submit is durable there, and so is a look whose
    report goes to that owner; its reports, which crossed machines, are durable in the owner's ledger."""
    asked = _asked(home="elsewhere")
    assert asked.durable is not None
    assert asked.durable.desks[HOME] == asked.desks[HOME]
    assert asked.durable.ledger == asked.ledger
    ready = _step(asked, AtDesk(HOME, d.Observe(2, "a1", d.Observed.IDLE)))
    assert ready.durable is not None and ready.ledger != asked.ledger
    assert (ready.durable.ledger, ready.durable.desks) == (ready.ledger, ready.desks)
    quiet = _step(ready, AtDesk(HOME, d.Observe(3, "a0", d.Observed.BUSY)))
    assert quiet.desks != ready.desks and quiet.durable == ready.durable
    assert report_rides("mach0", "mach0") and not report_rides("mach1", "mach0")
    assert not report_rides(None, "mach0")


def test_a_desk_tells_its_owner_every_notice_again_at_its_start() -> None:
    asked = _asked()
    reports = start_reports(asked.desks[HOME], 7)
    notices = asked.desks[HOME].notices
    assert {report.notice_id for report in reports} == set(notices)
    for report in reports:
        notice = notices[report.notice_id]
        assert (report.at, report.team_id, report.state) == (7, notice.team_id, notice.state.value)
        assert report.reason == (None if notice.reason is None else notice.reason.value)


def test_without_a_machine_crash_to_model_no_durable_journals_are_kept() -> None:
    system = _step(System(), CreateTeam(0, "t", "model", ()))
    assert system.durable is None and system.desks == Map()


def test_the_checker_catches_a_write_start_that_rides() -> None:
    """Seed: "recoverable after a crash without repeating an uncertain write". Were `write_started` to ride
    as its end does, a machine crash after the paste would lose the record that it began, and the notice
    on screen would be typed again: the scenario finds that within six steps."""
    name = "write-start-rides"
    scenario = SCENARIOS[CAUGHT_BY[name]]
    assert explore(scenario, scenario.max_depth).violation is None
    found = explore(scenario.with_protocol(MUTANTS[name]), scenario.max_depth).violation
    assert found is not None and found.property == "no-duplicate-write"
    assert "the machine crashes and restarts" in found.labels
    _states, violations = replay(scenario, found.labels)
    assert not violations, "the real protocol survives the same steps"


def test_a_machine_crash_loses_what_rode_and_the_notice_is_not_typed_again() -> None:
    """The crash after the write's end and its turn rode: the desk's journal keeps the durable
    `write_started`, so the restart leaves the notice `unconfirmed` (never typed again), and its report
    takes the owner's view back to what the desk can vouch for."""
    scenario = SCENARIOS["machine-crash-restart"]
    labels = (
        "m0 asks m1 q0",
        "shell observes a1 idle",
        "shell rechecks a1 (idle) for t/q0/question",
        "write t/q0/question ends ok",
        "the machine crashes and restarts",
    )
    states, violations = replay(scenario, labels)
    assert not violations and len(states) == len(labels) + 1, "every step is taken"
    crashed = states[-1]
    notice = crashed.system.desks[HOME].notices[NOTICE]
    assert (notice.state, notice.reason) == (d.DeliveryState.UNCONFIRMED, d.Reason.RESTART)
    view = delivery_view(crashed.system.ledger.teams["t"], NOTICE)
    assert view is not None and view.state == d.DeliveryState.UNCONFIRMED.value
    assert crashed.written == Map({NOTICE: 1})


def test_an_accepted_ask_the_ledger_lost_is_a_violation() -> None:
    """Guide: "no acknowledged operation vanishes". The world remembers which planned asks were accepted,
    and a ledger without one of them (a crash that lost a durable step) breaks `no-acknowledged-ask-lost`."""
    scenario = SCENARIOS["machine-crash-restart"]
    start = scenario.initial()
    assert "no-acknowledged-ask-lost" not in {name for name, _ in scenario.always(start)}
    forgotten = attrs.evolve(start, asked=frozenset({0}))
    assert ("no-acknowledged-ask-lost", "q0 was accepted, and the ledger no longer has it") in list(
        scenario.always(forgotten)
    )


def test_only_steps_the_owner_restates_ride_and_only_when_the_owner_is_here() -> None:
    """The owner's requests (a submit, a withdrawal, a hold) of a team owned here ride: the owner restates
    them at every start, and the desk writes nothing before the restated holds and withdrawals are applied.
    A paired owner hears of the step once and restates nothing when only this machine restarts: never then.
    A member's read is not the owner's to restate: never."""
    here, elsewhere = (lambda team_id: True), (lambda team_id: False)
    submit = d.Submit(10, "t1", "t1/q1/question", NoticeKind.QUESTION, "q1", "m1", "here", "a1", 10**12, "hi")
    submitted = d.step(d.empty_desk("here"), submit, SMALL)
    assert isinstance(submitted, Accepted)
    assert any(isinstance(effect, d.DeliveryChanged) for effect in submitted.effects)
    assert _unheeded([submit], [submitted], here)
    assert not _unheeded([submit], [submitted], elsewhere)
    for step in (d.Withdraw(11, "t1/q1/question"), d.Hold(11, "t1"), d.Hold(11, "quiet")):
        stepped = d.step(submitted.state, step, SMALL)
        assert isinstance(stepped, Accepted) and stepped.changed
        assert _unheeded([step], [stepped], here), step
        assert not _unheeded([step], [stepped], elsewhere), step  # even a hold that changed no notice
    read = d.InboxRead(11, ("t1/q1/question",))
    was_read = d.step(submitted.state, read, SMALL)
    assert isinstance(was_read, Accepted) and was_read.changed
    assert not _unheeded([read], [was_read], here)


def test_the_end_of_a_write_and_its_turn_ride_only_when_the_owner_is_here() -> None:
    """Lost with a machine crash, the write its durable `write_started` recorded is `unconfirmed` after the
    restart, never written again: they ride when their report goes to an owner on this machine. A paired
    owner would have been told `delivered` or `accepted` of a write this desk no longer vouches for, and
    nothing would tell it otherwise: never then. A write's start never rides."""
    here, elsewhere = (lambda team_id: True), (lambda team_id: False)
    desk = d.empty_desk("here")
    notice = "t1/q1/question"
    for command in (
        d.Submit(10, "t1", notice, NoticeKind.QUESTION, "q1", "m1", "here", "a1", 10**12, "hi"),
        d.Observe(11, "a1", d.Observed.IDLE),
    ):
        stepped = d.step(desk, command, SMALL)
        assert isinstance(stepped, Accepted)
        desk = stepped.state
    start = d.WriteStarted(12, notice, d.Observed.IDLE, 12)
    started = d.step(desk, start, SMALL)
    assert isinstance(started, Accepted) and started.changed
    assert not _unheeded([start], [started], here)
    for end in (d.WriteFinished(13, notice, result) for result in d.WriteResult):
        ended = d.step(started.state, end, SMALL)
        assert isinstance(ended, Accepted) and ended.changed
        assert _unheeded([end], [ended], here), end
        assert not _unheeded([end], [ended], elsewhere), end
    finished = d.step(started.state, d.WriteFinished(13, notice, d.WriteResult.OK), SMALL)
    assert isinstance(finished, Accepted)
    turn = d.TurnObserved(14, notice)
    turned = d.step(finished.state, turn, SMALL)
    assert isinstance(turned, Accepted) and turned.changed
    assert _unheeded([turn], [turned], here)
    assert not _unheeded([turn], [turned], elsewhere)


def test_the_end_of_a_write_rides_by_its_own_team() -> None:
    """Which team a write's end or turn concerns is read from its notice id: one owned here rides, one of a
    team owned elsewhere on the same desk does not."""
    only_t1 = "t1".__eq__
    quiet = Accepted(d.empty_desk("here"), None, (), ())
    for notice in ("t1/q1/question", "t2/t1/answer"):
        for report in (d.WriteFinished(13, notice, d.WriteResult.OK), d.TurnObserved(14, notice)):
            assert desk_step_rides(report, quiet, only_t1) is notice.startswith("t1/"), report
    assert not desk_step_rides(d.TurnObserved(14, "not a notice id"), quiet, lambda team_id: True)
