# Deliberately broken variants of the protocol, each selectable by name: the proof that the checker looks.
# Each mutant wraps the real reducers and breaks exactly one rule the way a plausible bug would; the test
# suite requires that some shipped scenario catches every one of them, and that the real protocol passes.
from __future__ import annotations

from collections.abc import Callable, Collection
from functools import partial

import attrs
from immutables import Map

from harness.core import board as b
from harness.core import delivery as d
from harness.core.commands import Ask, Reply, Tick
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import Limits
from harness.core.outcome import Accepted
from harness.core.queries import WaitDecision, WaitReason
from harness.core.records import Exchange, NoticeKind, QuestionState, Team
from harness.core.remote_grant import Consumption, GrantedRequest, Grants, admit
from harness.core.riding import OwnedHere, desk_step_rides
from harness.core.routing import ROUTES, First, route
from harness.core.system import Action, AtDesk, System, desk_command, step_system
from harness.core.team import answer_notice
from harness.core.values import replace

from .board_world import BOARD_REAL, BoardProtocol
from .link import Transport
from .world import REAL, Protocol, real_step_system

Outcome = Accepted[System] | Rejected


def _retry_uncertain_after_restart(system: System, action: Action, limits: Limits) -> Outcome:
    """After a restart the desk puts writes that may have happened back in the queue (and forgets it began
    them), so a notice that may already be on screen is pasted again."""
    outcome = real_step_system(system, action, limits)
    if isinstance(outcome, Rejected) or not (
        isinstance(action, AtDesk) and isinstance(action.command, d.Restart)
    ):
        return outcome
    desk = outcome.state.desks[action.machine_id]
    notices, sessions = desk.notices, desk.sessions
    for notice in desk.notices.values():
        if notice.state is d.DeliveryState.UNCONFIRMED and notice.reason is d.Reason.RESTART:
            notices = notices.set(
                notice.id,
                replace(
                    notice,
                    state=d.DeliveryState.QUEUED,
                    reason=d.Reason.UNOBSERVED,
                    started_at=None,
                    seen_at=None,
                ),
            )
            session = sessions[notice.agent_id]
            timers = tuple(sorted((*session.timers, (notice.expires_at, notice.id))))
            requeued = replace(session, queue=(notice.id, *session.queue), writing=None, timers=timers)
            sessions = sessions.set(notice.agent_id, requeued)
    desk = replace(desk, notices=notices, sessions=sessions)
    return attrs.evolve(
        outcome, state=attrs.evolve(outcome.state, desks=outcome.state.desks.set(desk.machine_id, desk))
    )


def _accept_non_addressee_reply(system: System, action: Action, limits: Limits) -> Outcome:
    """A reply by a member the question was not addressed to is taken as the answer."""
    outcome = real_step_system(system, action, limits)
    if not (
        isinstance(outcome, Rejected) and outcome.code is ErrorCode.WRONG_MEMBER and isinstance(action, Reply)
    ):
        return outcome
    team = system.ledger.teams[action.team_id]
    intruder = team.keys.get(action.member_key or "")
    exchange = team.exchanges[action.question_id]
    forced = real_step_system(system, attrs.evolve(action, member_key=None, member_id=exchange.to), limits)
    if isinstance(forced, Rejected) or intruder is None:
        return outcome
    return attrs.evolve(
        forced,
        state=_edit_exchange(forced.state, action.team_id, exchange.id, lambda e: _authored_by(e, intruder)),
    )


def _authored_by(exchange: Exchange, author: str) -> Exchange:
    assert exchange.answer is not None
    return replace(exchange, answer=replace(exchange.answer, author=author))


def _resume_on_late_answer(system: System, action: Action, limits: Limits) -> Outcome:
    """A late reply to an expired or cancelled question still resumes the asker with a continuation."""
    outcome = real_step_system(system, action, limits)
    if isinstance(outcome, Rejected) or not isinstance(action, Reply):
        return outcome
    exchange = outcome.state.ledger.teams[action.team_id].exchanges[action.question_id]
    if exchange.answer is None or not exchange.answer.late:
        return outcome
    team = outcome.state.ledger.teams[action.team_id]
    asker = team.members[exchange.from_]
    # The continuation the real reducer gives an on-time answer, routed as the real system routes it.
    submit = desk_command(outcome.state.ledger, answer_notice(team, exchange, limits), action.at, limits)
    resumed = real_step_system(outcome.state, AtDesk(asker.machine_id, submit), limits)
    if isinstance(resumed, Rejected):
        return outcome
    return attrs.evolve(resumed, effects=outcome.effects + resumed.effects)


def _write_on_stale_idle(system: System, action: Action, limits: Limits) -> Outcome:
    """The write boundary trusts the desk's last look at the screen instead of the shell's recheck."""
    if isinstance(action, AtDesk) and isinstance(action.command, d.WriteStarted):
        desk = system.desks.get(action.machine_id)
        notice = desk.notices.get(action.command.notice_id) if desk is not None else None
        session = desk.sessions.get(notice.agent_id) if desk is not None and notice is not None else None
        if session is not None and session.observed is not None:
            stale = attrs.evolve(
                action.command, seen=session.observed, seen_at=max(session.observed_at, session.idle_after)
            )
            return real_step_system(system, AtDesk(action.machine_id, stale), limits)
    return real_step_system(system, action, limits)


def _forget_pending_count(system: System, action: Action, limits: Limits) -> Outcome:
    """An ask is not counted against its sender's pending questions."""
    outcome = real_step_system(system, action, limits)
    if isinstance(outcome, Rejected) or not isinstance(action, Ask) or not outcome.changed:
        return outcome
    team = outcome.state.ledger.teams[action.team_id]
    sender = team.exchanges[action.id].from_
    count = team.pending_by_sender[sender] - 1
    pending = team.pending_by_sender.set(sender, count) if count else team.pending_by_sender.delete(sender)
    return attrs.evolve(outcome, state=_edit_team(outcome.state, replace(team, pending_by_sender=pending)))


def _tick_never_expires(system: System, action: Action, limits: Limits) -> Outcome:
    """The clock passing a deadline expires nothing: questions stay open forever."""
    if isinstance(action, Tick):
        return Accepted(system, None, changed=False)
    return real_step_system(system, action, limits)


def _wait_ignores_incoming(
    team: Team, waiter: str, exchange: Exchange, now: int, until: int
) -> WaitDecision | None:
    """A wait returns only on its own question's answer or end, or its timeout: incoming questions don't
    break it, so two members waiting on each other sit out their whole timeouts."""
    current = team.exchanges[exchange.id]
    if current.state is QuestionState.ANSWERED:
        return WaitDecision(WaitReason.ANSWERED, current, ())
    if current.state is QuestionState.CANCELLED:
        return WaitDecision(WaitReason.CANCELLED, current, ())
    if current.state is QuestionState.EXPIRED:
        return WaitDecision(WaitReason.EXPIRED, current, ())
    return WaitDecision(WaitReason.TIMEOUT, current, ()) if now >= until else None


def _accept_out_of_grant_submit(
    grants: Grants,
    *,
    here: str,
    sender: str,
    command: GrantedRequest | Consumption,
    owned_here: Collection[str],
) -> Grants | Rejected:
    """A destination admits a question or answer notice its grant refuses (the grants stay as they were): a
    paired machine's notice reaches an agent that its team's owner never introduced there."""
    admitted = admit(grants, here=here, sender=sender, command=command, owned_here=owned_here)
    if (
        isinstance(admitted, Rejected)
        and isinstance(command, d.Submit)
        and command.kind is not NoticeKind.INTRODUCTION
    ):
        return grants
    return admitted


# The routing table (core/routing.py) with a submit's hold-first rule left out.
_NO_HOLD_FIRST = {**ROUTES, d.Submit: (ROUTES[d.Submit][0], First.NOTHING)}


def _no_hold_for_new_machine(system: System, action: Action, limits: Limits) -> Outcome:
    """A machine new to a paused team gets its first notice without the team's hold: the pause never
    reached it, so nothing there holds the notice back."""
    return step_system(system, action, limits, route=partial(route, table=_NO_HOLD_FIRST))


def _write_start_rides(command: d.DeskCommand, outcome: Accepted[d.Desk], owned_here: OwnedHere) -> bool:
    """The start of a write rides the next fsync as its end does: the paste goes out while the journal may
    still lose the record that it began, so after a machine crash the notice waits to be typed again."""
    return isinstance(command, d.WriteStarted) or desk_step_rides(command, outcome, owned_here)


def _edit_team(system: System, team: Team) -> System:
    ledger = replace(system.ledger, teams=system.ledger.teams.set(team.id, team))
    return attrs.evolve(system, ledger=ledger)


def _edit_exchange(
    system: System, team_id: str, exchange_id: str, edit: Callable[[Exchange], Exchange]
) -> System:
    team = system.ledger.teams[team_id]
    exchanges: Map[str, Exchange] = team.exchanges.set(exchange_id, edit(team.exchanges[exchange_id]))
    return _edit_team(system, replace(team, exchanges=exchanges))


MUTANTS: dict[str, Protocol] = {
    protocol.name: protocol
    for protocol in (
        attrs.evolve(REAL, name="retry-uncertain-after-restart", step=_retry_uncertain_after_restart),
        attrs.evolve(REAL, name="accept-non-addressee-reply", step=_accept_non_addressee_reply),
        attrs.evolve(REAL, name="resume-on-late-answer", step=_resume_on_late_answer),
        attrs.evolve(REAL, name="write-on-stale-idle", step=_write_on_stale_idle),
        attrs.evolve(REAL, name="wait-ignores-incoming", decide_wait=_wait_ignores_incoming),
        attrs.evolve(REAL, name="forget-pending-count", step=_forget_pending_count),
        attrs.evolve(REAL, name="tick-never-expires", step=_tick_never_expires),
        # The routing (core/routing.py), which the daemon runs as it is:
        attrs.evolve(REAL, name="no-hold-for-new-machine", step=_no_hold_for_new_machine),
        # The riding rule (core/riding.py), which the daemon's desk runs as it is:
        attrs.evolve(REAL, name="write-start-rides", step=partial(step_system, rides=_write_start_rides)),
        # The transport's rules (io/remote.py), each broken the way a plausible bug would break it:
        # a receiver that forgets which request ids it answered serves a retry twice (models/link.py)...
        attrs.evolve(
            REAL,
            name="serve-retried-request-again",
            transport=Transport(remembers_answered=False),
            description="The receiver forgets which request ids it answered and serves a retry again.",
        ),
        # ... and a sender that hands over the next item before the peer answered the last lets the relay
        # reorder the owner's requests and the desk's reports.
        attrs.evolve(
            REAL,
            name="send-before-answer",
            transport=Transport(window=2),
            description="A sender hands over its next item before the peer answered the last one.",
        ),
        # The grant (core/remote_grant.py): a destination that checks who may introduce but not who may
        # then ask lets a paired machine write into any agent registered there.
        attrs.evolve(
            REAL,
            name="accept-out-of-grant-submit",
            admit=_accept_out_of_grant_submit,
            description="A destination admits a question or answer notice outside the sender's grant.",
        ),
    )
}

# Where each mutant is expected to be caught; the test suite checks it. `harness check --mutant` tries all.
CAUGHT_BY: dict[str, str] = {
    "retry-uncertain-after-restart": "delivery-crash-restart",
    "accept-non-addressee-reply": "two-agents-ask-each-other",
    "resume-on-late-answer": "pause-resume-cancel",
    "write-on-stale-idle": "delivery-crash-restart",
    "wait-ignores-incoming": "wait-deadlock",
    "forget-pending-count": "two-agents-ask-each-other",
    "tick-never-expires": "two-agents-ask-each-other",
    "no-hold-for-new-machine": "join-a-paused-team",
    "write-start-rides": "machine-crash-restart",
    "serve-retried-request-again": "two-machines-lossy-link",
    "send-before-answer": "two-machines-lossy-link",
    "accept-out-of-grant-submit": "two-machines-hostile-peer",
}


# --- the board (core/board.py) ------------------------------------------------------------------------------
# Each wraps the real board reducer: where the real one refuses or answers, the broken one lets the reducer
# act on the board a plausible bug would have seen, so the result is otherwise a well-formed board (its
# measure, revision and operations right) and only the broken rule's invariant can notice.


def _steal_claim(board: b.Board, command: b.BoardCommand, limits: b.BoardLimits) -> b.BoardOutcome:
    """A claim on a task another member holds takes it over: the claim rule forgets the claimant."""
    outcome = b.step(board, command, limits)
    if not (isinstance(outcome, Rejected) and isinstance(command, b.Claim)):
        return outcome
    task = board.tasks.get(command.task_id)
    if task is None or task.claimant in (None, command.actor):
        return outcome
    return b.step(_with_record(board, "tasks", task.id, replace(task, claimant=None)), command, limits)


def _claim_unfinished_dependency(
    board: b.Board, command: b.BoardCommand, limits: b.BoardLimits
) -> b.BoardOutcome:
    """A task whose dependencies are unfinished can be claimed, and is then ready: the claim skips the
    transition table for a pending task."""
    outcome = b.step(board, command, limits)
    if not (isinstance(outcome, Rejected) and isinstance(command, b.Claim)):
        return outcome
    task = board.tasks.get(command.task_id)
    if task is None or task.state is not b.TaskState.PENDING:
        return outcome
    ready = replace(task, state=b.TaskState.READY)
    return b.step(_with_record(board, "tasks", task.id, ready), command, limits)


def _advance_unread_offset(board: b.Board, command: b.BoardCommand, limits: b.BoardLimits) -> b.BoardOutcome:
    """An unreadOnly read moves nextOffset past the page it returned, as a read of the whole mailbox does,
    though the page's notes have left the unread set: the notes that moved up into the gap are skipped."""
    outcome = b.step(board, command, limits)
    if not (
        isinstance(command, b.ReadMessages)
        and command.unread_only
        and isinstance(outcome, Accepted)
        and isinstance(outcome.result, b.Page)
        and outcome.result.next_offset is not None
    ):
        return outcome
    page = replace(outcome.result, next_offset=command.offset + len(outcome.result.notes))
    reader = command.actor if command.actor is not None else command.member
    member = outcome.state.members[reader or ""]
    if member.last_read is None or member.last_read.op != command.op:
        return attrs.evolve(outcome, result=page)
    receipt = replace(member.last_read, next_offset=page.next_offset)  # so a retry repeats the same page
    state = _with_record(outcome.state, "members", member.id, replace(member, last_read=receipt))
    return attrs.evolve(outcome, state=state, result=page)


def _uncounted_note(board: b.Board, command: b.BoardCommand, limits: b.BoardLimits) -> b.BoardOutcome:
    """A note is not counted in its sender's share: a member could send notes past `member_notes` and
    `member_bytes`, filling the board for everyone."""
    outcome = b.step(board, command, limits)
    if not (isinstance(command, b.SendNote) and command.actor is not None and isinstance(outcome, Accepted)):
        return outcome
    if not outcome.changed:
        return outcome
    kept = board.shares.get(command.actor)
    shares = outcome.state.shares.delete(command.actor) if kept is None else outcome.state.shares.set(
        command.actor, kept
    )
    return attrs.evolve(outcome, state=replace(outcome.state, shares=shares))


def _with_record(board: b.Board, field: str, key: str, record: object) -> b.Board:
    """`board` with `record` filed under `key`, its state measure kept right (B7), so the forged board differs
    from the real one only in the rule the mutant breaks."""
    records: Map[str, object] = getattr(board, field)
    return replace(
        board,
        **{field: records.set(key, record), "bytes": board.bytes + b.weight(record) - b.weight(records[key])},
    )


BOARD_MUTANTS: dict[str, BoardProtocol] = {
    protocol.name: protocol
    for protocol in (
        attrs.evolve(BOARD_REAL, name="steal-claim", step=_steal_claim),
        attrs.evolve(BOARD_REAL, name="claim-unfinished-dependency", step=_claim_unfinished_dependency),
        attrs.evolve(BOARD_REAL, name="advance-unread-offset", step=_advance_unread_offset),
        attrs.evolve(BOARD_REAL, name="uncounted-note", step=_uncounted_note),
    )
}

# Where each board mutant is caught, and by which property (the test suite checks both).
BOARD_CAUGHT_BY: dict[str, tuple[str, str]] = {
    "steal-claim": ("board-claim-race", "B11"),
    "claim-unfinished-dependency": ("board-dependency-chain", "B2"),
    "advance-unread-offset": ("board-paging-reader", "paging-skips-no-note"),
    "uncounted-note": ("board-paging-reader", "B15"),
}
