# The session's invariants (spec/session-v1.md, "Invariants", S1-S15) as production code. The Hypothesis
# machine and the daemon (with HARNESS_CHECK_INVARIANTS=1) call these same functions. The checks restate each
# rule from the records and the spec's tables rather than calling the reducer's helpers, so a wrong helper is
# caught, not echoed.
from __future__ import annotations

from collections.abc import Iterable

from . import errors
from .errors import Rejected
from .outcome import Accepted
from .session import (
    DEFAULT_SESSION_LIMITS,
    MODES,
    ROLE_TOOLS,
    TOOLS,
    Adjourn,
    Announce,
    AskRecord,
    AskState,
    CancelAsk,
    Conclude,
    PostAnnouncement,
    PostKind,
    ProtocolViolation,
    Recess,
    RecordingCommand,
    ReleaseAsker,
    Session,
    SessionCommand,
    SessionLimits,
    SessionState,
    Start,
    SubmitReminder,
    Termination,
    Tool,
    ToolCommand,
    TraceEvent,
    TraceKind,
    step,
)

Violation = tuple[str, str]
A = AskState


def session_violations(session: Session, limits: SessionLimits = DEFAULT_SESSION_LIMITS) -> list[Violation]:
    """Every state invariant (S1-S7) that `session` breaks."""
    found: list[Violation] = []
    for check in (
        _bounds,
        _one_reminder,
        _owed_index,
        _ending,
        _roles,
        _violations_follow_reminders,
        _orders,
    ):
        found.extend(check(session, limits))
    return found


def step_violations(
    before: Session | None,
    command: SessionCommand,
    outcome: Accepted[Session] | Rejected,
    limits: SessionLimits = DEFAULT_SESSION_LIMITS,
) -> list[Violation]:
    """Invariants about one transition (S8-S15), plus every state invariant of the result."""
    if isinstance(outcome, Rejected):
        return []  # S8 holds by construction: a Rejected carries no session to differ from `before`
    after = outcome.state
    found = session_violations(after, limits)
    effects = outcome.effects
    found.extend(_tool_allowed(after, command))
    found.extend(_announce_only_when_called(before, after, command, effects))
    if before is None:
        found.extend(_started(after, command, effects))
        return found
    found.extend(_ending_cancels(before, after, command, effects))
    found.extend(_reminders_once(before, after, effects))
    found.extend(_history_kept(before, after))
    if not outcome.changed and after != before:
        found.append(("S14", "an unchanged outcome carries a different session"))
    found.extend(_repeat_changes_nothing(after, command, outcome, limits))
    return found


def check_step(
    before: Session | None,
    command: SessionCommand,
    outcome: Accepted[Session] | Rejected,
    limits: SessionLimits = DEFAULT_SESSION_LIMITS,
) -> None:
    """Raise errors.ProtocolViolation on the first broken invariant: for debug builds and tests."""
    for invariant, detail in step_violations(before, command, outcome, limits):
        raise errors.ProtocolViolation(invariant, detail)


# --- state invariants ---------------------------------------------------------------------------------------


def _bounds(session: Session, limits: SessionLimits) -> Iterable[Violation]:
    """S1: every bound holds in every reachable state."""
    counts = {
        "participants": len(session.member_order) - 1,
        "lead_turns": session.lead_turns,
        "reminders": len(session.reminders),
        "announcements": len(session.announcements),
        "asks": len(session.ask_order),
        "rfcs": len(session.rfcs),
        "thread_posts": len(session.thread),
    }
    for bound, count in counts.items():
        if count > getattr(limits, bound):
            yield "S1", f"{count} {bound}; bound {getattr(limits, bound)}"
    if any(len(note.text) > limits.announcement_chars for note in session.announcements):
        yield "S1", "an announcement exceeds announcement_chars"
    texts = [*(r.text for r in session.rfcs), *(p.text for p in session.thread), session.summary or ""]
    if any(len(text) > limits.text_chars for text in texts):
        yield "S1", "a recorded text exceeds text_chars"


def _ordered_asks(session: Session) -> list[AskRecord]:
    """The asks in `ask_order` that exist: an order naming a missing ask is S7's to report, never a crash."""
    return [session.asks[qid] for qid in session.ask_order if qid in session.asks]


def _one_reminder(session: Session, limits: SessionLimits) -> Iterable[Violation]:
    """S2. Issue: "a participant with an owed ask gets exactly one reminder notice": never two for one."""
    if len(set(session.reminders)) != len(session.reminders):
        yield "S2", f"an ask was reminded twice: {session.reminders}"
    reminded = {ask.id for ask in _ordered_asks(session) if ask.reminded_at is not None}
    if reminded != set(session.reminders):
        yield "S2", f"asks marked reminded {sorted(reminded)} are not the reminders sent {session.reminders}"


def _owed_index(session: Session, limits: SessionLimits) -> Iterable[Violation]:
    """S3: a member's owed asks are exactly the in-flight asks addressed to it, oldest first."""
    expected: dict[str, list[str]] = {name: [] for name in session.member_order}
    for ask in _ordered_asks(session):
        if ask.state is A.IN_FLIGHT:
            expected.setdefault(ask.to, []).append(ask.id)
    actual = {name: list(ids) for name, ids in session.owed.items()}
    if actual != expected:
        yield "S3", f"the owed index {actual} is not the in-flight asks {expected}"


def _ending(session: Session, limits: SessionLimits) -> Iterable[Violation]:
    """S4: a session is ended exactly when it has a termination, a reason and an end time; an ended session
    has no ask in flight."""
    ended = session.state is SessionState.ENDED
    marks = (session.termination, session.reason, session.ended_at)
    if ended != all(mark is not None for mark in marks) or (not ended and any(m is not None for m in marks)):
        yield "S4", f"state {session.state} with termination, reason, end {marks}"
    if ended:
        flying = [ask.id for ask in _ordered_asks(session) if ask.state is A.IN_FLIGHT]
        if flying:
            yield "S4", f"the session {session.termination} with asks {flying} in flight"


def _roles(session: Session, limits: SessionLimits) -> Iterable[Violation]:
    """S5: members hold their mode's roles (the lead first), and every recorded call was made by a role whose
    tools include it: asks between two distinct members, announcements, requests, acknowledgements."""
    lead_role, participant_role, _count = MODES[session.mode]
    if not session.member_order or session.member_order[0] != session.lead:
        yield "S5", "the lead is not the first member"
    for name in session.member_order:
        wanted = lead_role if name == session.lead else participant_role
        if session.members[name].role is not wanted:
            yield "S5", f"{name!r} is a {session.members[name].role} in a {session.mode} session"

    def holds(name: str, tool: Tool) -> bool:
        member = session.members.get(name)
        return member is not None and tool in ROLE_TOOLS[member.role]

    for ask in session.asks.values():
        if ask.asker == ask.to or ask.to not in session.members or not holds(ask.asker, Tool.ASK):
            yield "S5", f"ask {ask.id!r} from {ask.asker!r} to {ask.to!r}"
    recorded = [
        *((note.author, Tool.ANNOUNCE) for note in session.announcements),
        *((request.author, Tool.REQUEST_FOR_COMMENT) for request in session.rfcs),
        *((post.author, Tool.ACKNOWLEDGE) for post in session.thread if post.kind is PostKind.ACKNOWLEDGE),
    ]
    for author, tool in recorded:
        if not holds(author, tool):
            yield "S5", f"{author!r} made a {tool} its role does not have"


def _violations_follow_reminders(session: Session, limits: SessionLimits) -> Iterable[Violation]:
    """S6: an ask is reminded no sooner than reminder_after_ms after it was asked, and released (a protocol
    violation) only after its reminder, no sooner than violation_after_ms later; released asks are exactly
    the violations."""
    released = [ask.id for ask in _ordered_asks(session) if ask.state is A.RELEASED]
    if sorted(released) != sorted(session.violations) or len(set(session.violations)) != len(released):
        yield "S6", f"released asks {released} are not the violations {session.violations}"
    for ask in session.asks.values():
        if ask.reminded_at is not None and ask.reminded_at < ask.created_at + limits.reminder_after_ms:
            yield "S6", f"ask {ask.id!r} was reminded early"
        if ask.state is A.RELEASED and (
            ask.reminded_at is None
            or ask.ended_at is None
            or ask.ended_at < ask.reminded_at + limits.violation_after_ms
            or ask.reason != "no_answer"
        ):
            yield "S6", f"ask {ask.id!r} was released without its reminder and grace, or not for no_answer"


def _orders(session: Session, limits: SessionLimits) -> Iterable[Violation]:
    """S7: each order lists its records once, each record is filed under its own id, and an ended ask says
    when and (unless answered) why."""
    if len(set(session.ask_order)) != len(session.ask_order) or set(session.ask_order) != set(session.asks):
        yield "S7", "the ask order does not list every ask once"
    if set(session.member_order) != set(session.members) or len(session.member_order) != len(session.members):
        yield "S7", "the member order does not list every member once"
    for qid, ask in session.asks.items():
        if ask.id != qid:
            yield "S7", f"ask {ask.id!r} is filed under {qid!r}"
        ended = ask.state is not A.IN_FLIGHT
        if ended != (ask.ended_at is not None) or (ended and ask.state is not A.ANSWERED and not ask.reason):
            yield "S7", f"ask {qid!r} is {ask.state} with end {ask.ended_at} and reason {ask.reason!r}"
    for op, command in session.operations.items():
        if command.op != op:
            yield "S7", f"operation {command.op!r} is filed under {op!r}"


# --- step invariants ----------------------------------------------------------------------------------------


def _tool_allowed(after: Session, command: SessionCommand) -> Iterable[Violation]:
    """S9: the role x tool table is enforced in every accepted command."""
    if not isinstance(command, ToolCommand):
        return
    tool = TOOLS[type(command)]
    member = after.members.get(command.actor)
    if member is None or tool not in ROLE_TOOLS[member.role]:
        yield "S9", f"{command.actor!r} was allowed {tool} as a {None if member is None else member.role}"


def _announce_only_when_called(
    before: Session | None, after: Session, command: SessionCommand, effects: tuple[object, ...]
) -> Iterable[Violation]:
    """S10: no announcement without an explicit Announce: only an accepted Announce adds one (by its caller,
    with its text) and only it owes a PostAnnouncement."""
    old = () if before is None else before.announcements
    new = after.announcements[len(old) :]
    posts = [effect for effect in effects if isinstance(effect, PostAnnouncement)]
    if after.announcements[: len(old)] != old:
        yield "S10", "a recorded announcement changed or vanished"
    if not isinstance(command, Announce):
        if new or posts:
            yield "S10", f"{type(command).__name__} announced {new} {posts}"
        return
    if len(new) > 1 or len(posts) != len(new):
        yield "S10", f"one Announce made announcements {new} and posts {posts}"
    for note in new:
        if (note.author, note.text, note.id) != (command.actor, command.text, command.op):
            yield "S10", f"announcement {note.id!r} is not the call's"


def _started(after: Session, command: SessionCommand, effects: tuple[object, ...]) -> Iterable[Violation]:
    """S15: a session starts from Start alone, traced once with one agent_start per member."""
    kinds = [effect.kind for effect in effects if isinstance(effect, TraceEvent)]
    if not isinstance(command, Start) or kinds != [
        TraceKind.SESSION_START,
        *(TraceKind.AGENT_START for _ in after.member_order),
    ]:
        yield "S15", f"a session began from {type(command).__name__} traced {kinds}"


def _ending_cancels(
    before: Session, after: Session, command: SessionCommand, effects: tuple[object, ...]
) -> Iterable[Violation]:
    """S11. Seed: Conclude/Adjourn/Recess "also cancels in-flight Asks, so askers see why nobody will answer
    their question". Every ask in flight when the session ends is cancelled with a reason, one CancelAsk each;
    `concluded` only by those three tools; one summary per ending, and none otherwise."""
    summaries = [e for e in effects if isinstance(e, TraceEvent) and e.kind is TraceKind.SUMMARY]
    ended_now = before.state is SessionState.RUNNING and after.state is SessionState.ENDED
    if len(summaries) != int(ended_now):
        yield "S11", f"{len(summaries)} summaries for a step that ended the session: {ended_now}"
    cancels = [effect for effect in effects if isinstance(effect, CancelAsk)]
    if not ended_now:
        if cancels:
            yield "S11", f"asks cancelled while the session runs: {cancels}"
        return
    concluding = isinstance(command, Conclude | Recess | Adjourn)
    if (after.termination is Termination.CONCLUDED) != concluding:
        yield "S11", f"{type(command).__name__} ended the session {after.termination}"
    flying = {qid for qid in before.ask_order if before.asks[qid].state is A.IN_FLIGHT}
    released = {effect.question_id for effect in effects if isinstance(effect, ReleaseAsker)}
    cancelled = {qid for qid in flying if after.asks[qid].state is A.CANCELLED}
    if cancelled != flying - released or len(cancels) != len(cancelled):
        yield "S11", f"in flight {sorted(flying)}, cancelled {sorted(cancelled)}, effects {cancels}"
    for effect in cancels:
        if not effect.reason or after.asks[effect.question_id].reason != effect.reason:
            yield "S11", f"ask {effect.question_id!r} was cancelled without its visible reason"


def _reminders_once(before: Session, after: Session, effects: tuple[object, ...]) -> Iterable[Violation]:
    """S12: a reminder is owed once per ask, ever: each SubmitReminder names an ask not reminded before and
    is one of the new reminders; each violation is one ProtocolViolation and one ReleaseAsker."""
    reminders = [(e.participant, e.question_id) for e in effects if isinstance(e, SubmitReminder)]
    new = after.reminders[len(before.reminders) :]
    if after.reminders[: len(before.reminders)] != before.reminders:
        yield "S12", "a reminder vanished from the record"
    if [qid for _to, qid in reminders] != list(new) or any(qid in before.reminders for qid in new):
        yield "S12", f"reminders {reminders} are not the new reminders {new}"
    for participant, qid in reminders:
        if after.asks[qid].to != participant:
            yield "S12", f"the reminder for {qid!r} went to {participant!r}, not its addressee"
    violations = [(e.participant, e.question_id) for e in effects if isinstance(e, ProtocolViolation)]
    releases = [e.question_id for e in effects if isinstance(e, ReleaseAsker)]
    new_violations = list(after.violations[len(before.violations) :])
    if [qid for _to, qid in violations] != new_violations or releases != new_violations:
        yield "S12", f"violations {violations}, releases {releases}, recorded {new_violations}"


def _history_kept(before: Session, after: Session) -> Iterable[Violation]:
    """S13: no ask disappears and an ended ask never changes; an ended session never changes."""
    if before.state is SessionState.ENDED and after != before:
        yield "S13", "an ended session changed"
    for qid, old in before.asks.items():
        new = after.asks.get(qid)
        if new is None:
            yield "S13", f"ask {qid!r} vanished"
        elif old.state is not A.IN_FLIGHT and new != old:
            yield "S13", f"ended ask {qid!r} changed"


def _repeat_changes_nothing(
    after: Session, command: SessionCommand, outcome: Accepted[Session], limits: SessionLimits
) -> Iterable[Violation]:
    """S14: a call with an operation id, sent again, returns the same result and changes nothing."""
    if not outcome.changed or not isinstance(command, RecordingCommand):
        return
    again = step(after, command, limits)
    if isinstance(again, Rejected) or again.changed or again.result != outcome.result:
        yield "S14", f"repeating operation {command.op!r} gave {again!r}, not {outcome.result!r}"
