# The delivery desk's invariants (spec/delivery-v1.md, "Invariants", D1-D11) as production code. The daemon
# (with HARNESS_CHECK_INVARIANTS=1), the Hypothesis machines and the model checker call these same
# functions, so "the invariant held" means one thing everywhere. Each violation is (invariant id, detail).
from __future__ import annotations

from collections.abc import Iterable

from . import delivery as d
from .errors import ProtocolViolation, Rejected
from .limits import DEFAULT_LIMITS, Limits
from .outcome import Accepted
from .queries import decide_wait, incoming_for
from .records import NoticeKind, QuestionState
from .system import System

Violation = tuple[str, str]

S = d.DeliveryState
NEVER_WRITTEN = frozenset({S.QUEUED, S.HELD, S.WITHDRAWN, S.EXPIRED})
# For each state, the states one event can lead to (the table's closure of one step).
REACHABLE: dict[d.DeliveryState, frozenset[d.DeliveryState]] = {
    state: frozenset(
        target
        for (source, _event), target in d.DELIVERY_TRANSITIONS.items()
        if source is state and isinstance(target, d.DeliveryState)
    )
    for state in S
}


# --- one desk -----------------------------------------------------------------------------------------------


def desk_violations(desk: d.Desk, limits: Limits = DEFAULT_LIMITS) -> list[Violation]:
    """Every state invariant of one desk (D1-D3, D5, D7-D9, D11)."""
    found: list[Violation] = [("D9", detail) for _amount, detail in bound_excess(desk, limits).values()]
    writing_by_agent: dict[str, list[str]] = {}
    expected: dict[str, tuple[list[d.Notice], list[d.Notice], list[tuple[int, str]]]] = {}
    for notice_id, notice in desk.notices.items():
        found.extend(_notice_violations(desk, notice_id, notice, limits))
        queued, held, timers = expected.setdefault(notice.agent_id, ([], [], []))
        if notice.state is S.QUEUED:
            queued.append(notice)
            timers.append((notice.expires_at, notice.id))
        elif notice.state is S.HELD:
            held.append(notice)
            timers.append((notice.expires_at, notice.id))
        elif notice.state is S.WRITING:
            writing_by_agent.setdefault(notice.agent_id, []).append(notice.id)
            timers.append(((notice.started_at or 0) + limits.write_timeout_ms, notice.id))
    for agent_id, writing in writing_by_agent.items():
        if len(writing) > 1:
            found.append(("D2", f"agent {agent_id!r} has {len(writing)} notices writing: {writing}"))
    for agent_id, (queued, held, timers) in expected.items():
        session = desk.sessions.get(agent_id)
        if session is None:
            found.append(("D11", f"agent {agent_id!r} has notices but no session"))
            continue
        found.extend(_session_violations(desk, session, queued, held, timers, writing_by_agent))
    for agent_id, session in desk.sessions.items():
        if session.agent_id != agent_id:
            found.append(("D11", f"session {session.agent_id!r} filed under {agent_id!r}"))
        if agent_id not in expected and (session.queue or session.held or session.writing or session.timers):
            found.append(("D11", f"session {agent_id!r} indexes notices the desk does not have"))
        if session.observed is not None and session.observed_at < desk.restarted_at:
            found.append(("D5", f"session {agent_id!r} trusts an observation from before the restart"))
    return found


def bound_excess(desk: d.Desk, limits: Limits = DEFAULT_LIMITS) -> dict[str, tuple[int, str]]:
    """D9's bounds that `desk` is over, by subject, with how far it reaches (a count or a size) and the
    violation's detail: the state check reports them all, a step only those it made or grew."""
    excess: dict[str, tuple[int, str]] = {}
    if len(desk.notices) > limits.delivery_records:
        detail = f"{len(desk.notices)} delivery records; bound {limits.delivery_records}"
        excess["delivery_records"] = (len(desk.notices), detail)
    for notice_id, notice in desk.notices.items():
        size = len(notice.text.encode("utf-8"))
        if size > limits.notice_bytes:
            detail = f"notice {notice.id!r} has {size} bytes; bound {limits.notice_bytes}"
            excess[f"notice_bytes/{notice_id}"] = (size, detail)
    for agent_id, session in desk.sessions.items():
        unsent = d.unsent_count(session)
        if unsent > limits.queued_per_agent:
            bound = limits.queued_per_agent
            detail = f"agent {agent_id!r} has {unsent} notices queued or in flight; bound {bound}"
            excess[f"queued_per_agent/{agent_id}"] = (unsent, detail)
    return excess


def _notice_violations(desk: d.Desk, notice_id: str, notice: d.Notice, limits: Limits) -> Iterable[Violation]:
    if notice.id != notice_id:
        yield ("D11", f"notice {notice.id!r} filed under {notice_id!r}")
    if notice.seq >= desk.next_seq or notice.seq < 1:
        yield ("D11", f"notice {notice.id!r} has seq {notice.seq}; next is {desk.next_seq}")
    written = notice.started_at is not None
    if notice.state in d.WRITTEN and not written:
        yield ("D1", f"notice {notice.id!r} is {notice.state} without a recorded write")
    if notice.state in NEVER_WRITTEN and written:
        yield ("D1", f"notice {notice.id!r} was written but is {notice.state}")
    if written:
        assert notice.started_at is not None
        seen = notice.seen_at
        if seen is None or not 0 <= notice.started_at - seen <= limits.observation_fresh_ms:
            yield ("D3", f"notice {notice.id!r} started at {notice.started_at}, idle seen at {seen}")
    if notice.lost_at is None and notice.lost_started_at is not None:
        yield ("D1", f"notice {notice.id!r} records a lost write that nobody declared lost")
    lost_write = notice.lost_started_at
    if notice.lost_at is not None and (lost_write is None or lost_write > notice.lost_at):
        yield ("D1", f"notice {notice.id!r} was declared lost at {notice.lost_at} without an earlier write")
    if notice.lost_at is not None and notice.started_at is not None and notice.started_at < notice.lost_at:
        yield ("D1", f"notice {notice.id!r} was written again before its first write was declared lost")
    if notice.state is S.WRITING and notice.started_at is not None and notice.started_at < desk.restarted_at:
        yield ("D5", f"notice {notice.id!r} is still writing from before the restart at {desk.restarted_at}")
    if notice.state is S.QUEUED and notice.team_id in desk.held_teams:
        yield ("D7", f"notice {notice.id!r} is queued while team {notice.team_id!r} is held")
    if notice.state is S.HELD and notice.team_id not in desk.held_teams:
        yield ("D7", f"notice {notice.id!r} is held but team {notice.team_id!r} is not")
    if notice.state is S.WITHDRAWN and notice.reason is None:
        yield ("D8", f"notice {notice.id!r} was withdrawn without a reason")
    if notice.state is S.QUEUED and notice.reason is None:
        yield ("D11", f"queued notice {notice.id!r} has no reason")


def _session_violations(  # noqa: PLR0917
    desk: d.Desk,
    session: d.Session,
    queued: list[d.Notice],
    held: list[d.Notice],
    timers: list[tuple[int, str]],
    writing_by_agent: dict[str, list[str]],
) -> Iterable[Violation]:
    agent = session.agent_id
    if session.queue != tuple(n.id for n in sorted(queued, key=lambda n: n.seq)):
        yield ("D11", f"agent {agent!r} queue {session.queue} is not its queued notices in submission order")
    if session.held != tuple(n.id for n in sorted(held, key=lambda n: n.seq)):
        yield ("D11", f"agent {agent!r} held index {session.held} is not its held notices in order")
    writing = writing_by_agent.get(agent, [])
    if [session.writing] != writing if session.writing is not None else writing:
        yield ("D2", f"agent {agent!r} writes {session.writing!r} but {writing} are writing")
    if session.timers != tuple(sorted(timers)):
        yield ("D11", f"agent {agent!r} timers {session.timers} != {tuple(sorted(timers))}")
    for notice_id in session.queue[1:]:
        if desk.notices[notice_id].reason is not d.Reason.PRESSURE:
            yield ("D2", f"notice {notice_id!r} behind the head of {agent!r} is not waiting as pressure")
    head = desk.notices[session.queue[0]] if session.queue else None
    if head is not None and session.writing is not None and head.reason is not d.Reason.PRESSURE:
        yield ("D2", f"the head of {agent!r} is not waiting while {session.writing!r} is written")


# --- one step -----------------------------------------------------------------------------------------------


def step_violations(
    before: d.Desk,
    command: d.DeskCommand,
    outcome: Accepted[d.Desk] | Rejected,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Violation]:
    """Invariants about one transition of a desk, plus every state invariant of the result (D9's bounds as
    the step sees them: only an excess it made or grew, see `grown_excess`)."""
    if isinstance(outcome, Rejected):
        return []  # a Rejected carries no state: the desk stays as it was by construction
    after = outcome.state
    found = [violation for violation in desk_violations(after, limits) if violation[0] != "D9"]
    found.extend(grown_excess(before, after, limits))
    found.extend(transition_violations(before, after))
    found.extend(effect_violations(before, command, outcome))
    return found


def grown_excess(before: d.Desk, after: d.Desk, limits: Limits = DEFAULT_LIMITS) -> list[Violation]:
    """D9 as a step sees it: no step takes the desk over a bound, or further over one. A daemon restarted
    with lower `delivery_records`, `queued_per_agent` or `notice_bytes` than its desk holds keeps what it
    holds (refusing new notices of that kind); an excess the step found and did not grow is inherited."""
    held = bound_excess(before, limits)
    return [
        ("D9", detail)
        for subject, (amount, detail) in bound_excess(after, limits).items()
        if amount > held.get(subject, (0, ""))[0]
    ]


def transition_violations(before: d.Desk, after: d.Desk) -> list[Violation]:
    """Notices move only along DELIVERY_TRANSITIONS; none disappears; a write is never undone or redone."""
    found: list[Violation] = []
    if after.restarted_at < before.restarted_at:
        found.append(("D5", "the restart time went backwards"))
    if len(after.notices) < len(before.notices):
        found.append(("D9", "delivery records disappeared"))
    for notice_id, new in after.notices.items():
        old = before.notices.get(notice_id)
        if old is None:
            if new.state not in (S.QUEUED, S.HELD):
                found.append(("D1", f"new notice {notice_id!r} starts {new.state}"))
            continue
        moved = new.state is not old.state and new.state not in REACHABLE[old.state]
        if moved and not _declared_lost(old, new):  # a loss declared while its team is paused waits held
            found.append(("D1", f"notice {notice_id!r} went {old.state} -> {new.state}, not in the table"))
        if old.started_at is not None and new.started_at != old.started_at and not _declared_lost(old, new):
            found.append(("D1", f"notice {notice_id!r} written again ({old.started_at}, {new.started_at})"))
        lost = (old.lost_at, old.lost_started_at)
        if old.lost_at is not None and (new.lost_at, new.lost_started_at) != lost:
            found.append(("D1", f"notice {notice_id!r} changed the record of its lost write"))
        if _identity(old) != _identity(new):
            found.append(("D11", f"notice {notice_id!r} changed what it is"))
    return found


def _declared_lost(old: d.Notice, new: d.Notice) -> bool:
    """The one way a written notice becomes unsent again: the owner declared its unconfirmed first write
    lost, and the lost write stays on record."""
    return (
        old.state is S.UNCONFIRMED
        and old.lost_at is None
        and new.state in (S.QUEUED, S.HELD)
        and new.started_at is None
        and new.lost_at is not None
        and new.lost_started_at == old.started_at
    )


def _identity(notice: d.Notice) -> tuple[object, ...]:
    return (notice.text, notice.expires_at, notice.seq, notice.agent_id, notice.team_id, notice.kind)


def effect_violations(before: d.Desk, command: d.DeskCommand, outcome: Accepted[d.Desk]) -> list[Violation]:
    """Effects are the desk's four kinds only (D4); a write only for the notice this step started (D1, D3)."""
    found: list[Violation] = []
    after = outcome.state
    writes = [effect for effect in outcome.effects if isinstance(effect, d.WriteNotice)]
    for effect in outcome.effects:
        if not isinstance(effect, d.DESK_EFFECTS):
            found.append(("D4", f"the desk asked for {effect!r}, which is no delivery effect"))
    if len(writes) > 1:
        found.append(("D1", f"one step wrote {len(writes)} notices"))
    for write in writes:
        old = before.notices.get(write.notice_id)
        new = after.notices.get(write.notice_id)
        if old is None or new is None or old.state is not S.QUEUED or new.state is not S.WRITING:
            found.append(("D1", f"write of {write.notice_id!r} without a queued -> writing move"))
            continue
        if write.text != new.text or write.agent_id != new.agent_id:
            found.append(("D4", f"write of {write.notice_id!r} is not exactly its notice into its session"))
        if not isinstance(command, d.WriteStarted) or command.seen is not d.Observed.IDLE:
            found.append(("D3", f"write of {write.notice_id!r} without an idle check at the write boundary"))
    for effect in outcome.effects:
        if isinstance(effect, d.WriteDue):
            session = after.sessions.get(effect.agent_id)
            head = session.queue[0] if session is not None and session.queue else None
            if session is None or head != effect.notice_id or session.writing:
                found.append(("D2", f"write of {effect.notice_id!r} offered out of order"))
            elif after.notices[effect.notice_id].reason is not d.Reason.READY:
                found.append(("D3", f"write of {effect.notice_id!r} offered on a session not fresh idle"))
    for notice_id, new in after.notices.items():
        old = before.notices.get(notice_id)
        declared = isinstance(command, d.Inspect) and not command.landed and command.notice_id == notice_id
        if old is not None and old.lost_at is None and new.lost_at is not None and not declared:
            found.append(("D1", f"notice {notice_id!r} became writable again without a declared loss"))
    if isinstance(command, d.Restart) and any(n.state is S.WRITING for n in after.notices.values()):
        found.append(("D5", "a write survived the restart"))
    if isinstance(command, d.InboxRead | d.AnswerRetrieved):
        ids = command.notice_ids if isinstance(command, d.InboxRead) else (command.notice_id,)
        for notice_id in ids:
            old = before.notices.get(notice_id)
            new = after.notices.get(notice_id)
            if old is None or new is None:
                continue
            if old.state in (S.QUEUED, S.HELD) and new.state is not S.WITHDRAWN:
                found.append(("D6", f"read notice {notice_id!r} was not suppressed"))
            if old.state in d.WRITTEN and new.state is S.WITHDRAWN:
                found.append(("D6", f"written notice {notice_id!r} was withdrawn"))
    if isinstance(command, d.Release):
        for notice_id, new in after.notices.items():
            old = before.notices.get(notice_id)
            if old is not None and new.state is S.QUEUED and old.state not in (S.QUEUED, S.HELD):
                found.append(("D7", f"release queued {notice_id!r}, which was {old.state}"))
    return found


# --- the composed system ------------------------------------------------------------------------------------


def system_violations(system: System, now: int, limits: Limits = DEFAULT_LIMITS) -> list[Violation]:
    """Every desk's invariants, plus the rules that span owner and destination (D8, D10)."""
    found: list[Violation] = []
    for desk in system.desks.values():
        found.extend(desk_violations(desk, limits))
    found.extend(spanning_violations(system, now))
    return found


def spanning_violations(system: System, now: int) -> list[Violation]:
    """The rules that span owner and destinations (D8, D10, desks filed by machine), without each desk's own
    invariants: for a caller that checks those per desk already (the model checker memoizes them)."""
    found: list[Violation] = []
    for machine_id, desk in system.desks.items():
        if desk.machine_id != machine_id:
            found.append(("D11", f"desk {desk.machine_id!r} filed under {machine_id!r}"))
        for notice in desk.notices.values():
            found.extend(_late_work(system, notice))
    found.extend(wait_violations(system, now))
    return found


def _late_work(system: System, notice: d.Notice) -> Iterable[Violation]:
    team = system.ledger.teams.get(notice.team_id)
    if team is None:
        yield ("D8", f"notice {notice.id!r} of unknown team {notice.team_id!r}")
        return
    if notice.kind is NoticeKind.INTRODUCTION:
        return
    exchange = team.exchanges.get(notice.subject_id)
    if exchange is None:
        yield ("D8", f"notice {notice.id!r} about unknown exchange {notice.subject_id!r}")
        return
    if notice.kind is NoticeKind.ANSWER and (exchange.answer is None or exchange.answer.late):
        yield ("D8", f"continuation {notice.id!r} for {exchange.state} work without an on-time answer")
    unsent = notice.state in (S.QUEUED, S.HELD)
    if notice.kind is NoticeKind.QUESTION and unsent and exchange.state is not QuestionState.OPEN:
        yield ("D8", f"question notice {notice.id!r} still unsent for a {exchange.state} question")


def wait_violations(system: System, now: int) -> list[Violation]:
    """D10: a member waiting on its own question wakes when a question addressed to it is open."""
    found: list[Violation] = []
    for team in system.ledger.teams.values():
        for _deadline, exchange_id in team.open_deadlines:
            exchange = team.exchanges[exchange_id]
            asked = incoming_for(team, exchange.from_)
            if asked and decide_wait(team, exchange.from_, exchange, now, now + 1) is None:
                found.append(("D10", f"{exchange.from_!r} waiting on {exchange_id!r} blocks while asked"))
    return found


# --- raising checks -----------------------------------------------------------------------------------------


def _raise(found: list[Violation]) -> None:
    if found:
        invariant, detail = found[0]
        raise ProtocolViolation(invariant, detail)


def check_step(
    before: d.Desk,
    command: d.DeskCommand,
    outcome: Accepted[d.Desk] | Rejected,
    limits: Limits = DEFAULT_LIMITS,
) -> None:
    _raise(step_violations(before, command, outcome, limits))
