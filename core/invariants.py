# The team ledger's invariants as production code. The Hypothesis machines, the model checker and the
# daemon (with HARNESS_CHECK_INVARIANTS=1) all call these same functions, so "the invariant held" means
# one thing everywhere.
# Each violation names the spec's invariant number (spec/team-v1.md, "Invariants").
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import attrs

from .codec import team_view
from .commands import AddMember, Ask, CreateTeam, Reply, TeamCommand
from .effects import SubmitNotice
from .errors import ProtocolViolation, Rejected
from .limits import DEFAULT_LIMITS, MINUTE_MS, Limits
from .outcome import Accepted
from .queries import decide_wait, incoming_for
from .records import USER, Ledger, MembershipState, NoticeKind, QuestionState, Team
from .team import step

Violation = tuple[str, str]


def ledger_violations(ledger: Ledger, limits: Limits = DEFAULT_LIMITS) -> list[Violation]:
    """Every state invariant (T1-T9) that `ledger` breaks."""
    found: list[Violation] = [("T1", detail) for _amount, detail in bound_excess(ledger, limits).values()]
    for team_id, team in ledger.teams.items():
        if team.id != team_id:
            found.append(("T9", f"team {team.id!r} filed under {team_id!r}"))
        found.extend(team_violations(team, limits))
    return found


def team_violations(team: Team, limits: Limits = DEFAULT_LIMITS) -> list[Violation]:
    found: list[Violation] = []
    found.extend(_answers(team))
    found.extend(_parents(team, limits))
    found.extend(_indexes(team))
    found.extend(_no_keys_in_view(team))
    found.extend(_waits_wake(team))
    return found


def step_violations(
    before: Ledger,
    command: TeamCommand,
    outcome: Accepted[Ledger] | Rejected,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Violation]:
    """Invariants about one transition (T10-T13), plus every state invariant of the result."""
    if isinstance(outcome, Rejected):
        return []  # T10 holds by construction: a Rejected carries no state to differ from `before`
    after = outcome.state
    found = _new_violations(before, ledger_violations(after, limits), after, limits)
    for team_id, old in before.teams.items():
        new = after.teams.get(team_id)
        if new is None:
            found.append(("T11", f"team {team_id!r} vanished"))
        elif new.revision < old.revision or (
            new is not old and new != old and new.revision != old.revision + 1
        ):
            found.append(("T11", f"team {team_id!r} revision {old.revision} -> {new.revision}"))
        elif attrs.evolve(new, revision=old.revision) == old and new.revision != old.revision:
            found.append(("T11", f"team {team_id!r} revision bumped without a change"))
        else:
            found.extend(_history_kept(old, new))
    if not outcome.changed and after != before:
        found.append(("T11", "an unchanged outcome carries a different ledger"))
    if isinstance(command, Reply):
        found.extend(_late_answer_resumes_nothing(before, command, outcome))
    if isinstance(command, Ask) and outcome.changed:
        team = after.teams[command.team_id]
        exchange = team.exchanges.get(command.id)
        if exchange is None or exchange.state is not QuestionState.OPEN:
            found.append(("T13", f"accepted ask {command.id!r} left no open exchange"))
    return found


def _new_violations(before: Ledger, found: list[Violation], after: Ledger, limits: Limits) -> list[Violation]:
    """T1 as a step sees it: no step takes anything over a bound, or further over one. A bound lowered below
    what a team already holds (HARNESS_LIMITS at a restart) leaves the team over it, which refuses new work
    of that kind but is not corrupt: an excess the step found and did not grow is inherited, not broken."""
    held = bound_excess(before, limits)
    grown = {
        detail
        for subject, (amount, detail) in bound_excess(after, limits).items()
        if amount > held.get(subject, (0, ""))[0]
    }
    return [violation for violation in found if violation[0] != "T1" or violation[1] in grown]


def check_step(
    before: Ledger,
    command: TeamCommand,
    outcome: Accepted[Ledger] | Rejected,
    limits: Limits = DEFAULT_LIMITS,
) -> None:
    """Raise ProtocolViolation on the first broken invariant: for debug builds and tests."""
    for invariant, detail in step_violations(before, command, outcome, limits):
        raise ProtocolViolation(invariant, detail)


def bound_excess(ledger: Ledger, limits: Limits = DEFAULT_LIMITS) -> dict[str, tuple[int, str]]:
    """T1's findings: what is over a bound, by subject, with how far it reaches (a count, or 1 for a record
    over a size bound) and the violation's detail. `harness doctor` lists them for a daemon's limits."""
    excess: dict[str, tuple[int, str]] = {}
    if len(ledger.teams) > limits.teams:
        excess["teams"] = (len(ledger.teams), f"{len(ledger.teams)} teams retained; bound {limits.teams}")
    for team in ledger.teams.values():
        for subject, amount, detail in _excess(team, limits):
            excess[f"{team.id}/{subject}"] = (amount, detail)
    return excess


def _excess(team: Team, limits: Limits) -> Iterable[tuple[str, int, str]]:
    """(subject, amount, detail) of every bound of section 5 that `team` is over under `limits`."""
    if len(team.member_order) > limits.memberships:
        yield (
            "memberships",
            len(team.member_order),
            f"team {team.id!r} retains {len(team.member_order)} memberships",
        )
    if len(team.exchange_order) > limits.exchanges:
        yield (
            "exchanges",
            len(team.exchange_order),
            f"team {team.id!r} retains {len(team.exchange_order)} exchanges",
        )
    open_by_sender = Counter(
        exchange.from_ for exchange in team.exchanges.values() if exchange.state is QuestionState.OPEN
    )
    for sender, count in open_by_sender.items():
        if count > limits.pending_per_sender:
            yield f"pending_per_sender/{sender}", count, f"{sender!r} has {count} open questions"
    for exchange in team.exchanges.values():
        if len(exchange.text) > limits.question_chars or len(exchange.context or "") > limits.context_chars:
            yield f"text/{exchange.id}", 1, f"exchange {exchange.id!r} exceeds a text bound"
        if not limits.ttl_min_ms <= exchange.ttl_ms <= limits.ttl_max_ms:
            yield f"ttl/{exchange.id}", 1, f"exchange {exchange.id!r} has ttl {exchange.ttl_ms}"
        answer = exchange.answer
        if answer is not None and (
            len(answer.text) > limits.answer_chars
            or len(answer.evidence) > limits.evidence_refs
            or any(len(ref) > limits.evidence_ref_chars for ref in answer.evidence)
        ):
            yield f"answer/{exchange.id}", 1, f"answer to {exchange.id!r} exceeds a bound"
    if len(team.recent_asks) > limits.asks_per_minute:
        count = len(team.recent_asks)
        yield "asks_per_minute", count, f"team {team.id!r} counts {count} asks in its rate window"
    elif team.recent_asks and team.recent_asks[-1] - team.recent_asks[0] >= MINUTE_MS:
        yield "rate_window", 1, f"team {team.id!r} keeps asks older than its rate window"


def _answers(team: Team) -> Iterable[Violation]:
    for exchange in team.exchanges.values():
        answer = exchange.answer
        if exchange.state is QuestionState.ANSWERED and answer is None:
            yield "T3", f"exchange {exchange.id!r} is answered without an answer"
        if answer is None:
            continue
        if answer.member_id != exchange.to or answer.author not in (exchange.to, USER):
            yield (
                "T2",
                f"exchange {exchange.id!r} answered by {answer.author!r}, addressed to {exchange.to!r}",
            )
        if answer.late != (exchange.state is not QuestionState.ANSWERED):
            yield "T3", f"exchange {exchange.id!r} is {exchange.state} with late={answer.late}"
        if exchange.state is QuestionState.OPEN:
            yield "T3", f"open exchange {exchange.id!r} carries an answer"


def _parents(team: Team, limits: Limits) -> Iterable[Violation]:
    for exchange in team.exchanges.values():
        if exchange.parent_id is None:
            if exchange.depth != 1:
                yield "T4", f"root exchange {exchange.id!r} has depth {exchange.depth}"
            continue
        parent = team.exchanges.get(exchange.parent_id)
        if parent is None or exchange.from_ not in (parent.from_, parent.to):
            yield "T4", f"exchange {exchange.id!r} has a parent that does not involve its asker"
        elif exchange.depth != parent.depth + 1 or exchange.depth > limits.parent_chain:
            yield "T4", f"exchange {exchange.id!r} has depth {exchange.depth}"


def _indexes(team: Team) -> Iterable[Violation]:
    if set(team.exchange_order) != set(team.exchanges.keys()) or len(team.exchange_order) != len(
        team.exchanges
    ):
        yield "T9", f"team {team.id!r} exchange order disagrees with its exchanges"
    if set(team.member_order) != set(team.members.keys()) or len(team.member_order) != len(team.members):
        yield "T9", f"team {team.id!r} member order disagrees with its members"
    open_exchanges = sorted(
        (exchange.deadline_at, exchange.id)
        for exchange in team.exchanges.values()
        if exchange.state is QuestionState.OPEN
    )
    if list(team.open_deadlines) != open_exchanges:
        yield "T9", f"team {team.id!r} deadline index disagrees with its open exchanges"
    pending = Counter(team.exchanges[exchange_id].from_ for _deadline, exchange_id in open_exchanges)
    if dict(team.pending_by_sender.items()) != dict(pending):
        yield "T9", f"team {team.id!r} pending counts disagree with its open exchanges"
    active = {member.id for member in team.members.values() if member.state is MembershipState.ACTIVE}
    keyed = list(team.keys.values())
    if set(keyed) != active or len(keyed) != len(active):
        yield "T5", f"team {team.id!r} keys do not match its active memberships one to one"


def _no_keys_in_view(team: Team) -> Iterable[Violation]:
    if not team.keys:
        return
    text = repr(team_view(team))
    for key in team.keys:
        if key in text:
            yield "T6", f"a member key of team {team.id!r} appears in its public snapshot"


def _waits_wake(team: Team) -> Iterable[Violation]:
    """T8: a wait never blocks while a question addressed to the waiter is open (no mutual-wait deadlock)."""
    for _deadline, exchange_id in team.open_deadlines:
        exchange = team.exchanges[exchange_id]
        for waiter in (exchange.from_, exchange.to):
            if incoming_for(team, waiter) and decide_wait(team, waiter, exchange, 0, 1) is None:
                yield "T8", f"a wait by {waiter!r} on {exchange_id!r} blocks while a question to it is open"


def repeat_violations(
    after: Ledger, command: TeamCommand, outcome: Accepted[Ledger], limits: Limits = DEFAULT_LIMITS
) -> list[Violation]:
    """T14: an accepted operation repeated with the same id and content returns the same record."""
    if not isinstance(command, CreateTeam | AddMember | Ask | Reply):
        return []
    again = step(after, command, limits)
    if isinstance(again, Rejected) or again.changed or again.result != outcome.result:
        return [("T14", f"repeating {type(command).__name__} gave {again!r}")]
    return []


def _history_kept(old: Team, new: Team) -> Iterable[Violation]:
    """T12: retained history never shrinks; ended questions (their state and reason) and answers never
    change."""
    if len(new.exchange_order) < len(old.exchange_order) or len(new.member_order) < len(old.member_order):
        yield "T12", f"team {old.id!r} lost retained history"
        return
    for exchange_id in old.exchange_order:
        before, after = old.exchanges[exchange_id], new.exchanges[exchange_id]
        was, now = (before.state, before.reason), (after.state, after.reason)
        if before.state is not QuestionState.OPEN and now != was:
            yield "T12", f"ended exchange {exchange_id!r} moved {was} -> {now}"
        if before.answer is not None and after.answer != before.answer:
            yield "T12", f"the answer to {exchange_id!r} changed"


def _late_answer_resumes_nothing(
    before: Ledger, command: Reply, outcome: Accepted[Ledger]
) -> Iterable[Violation]:
    """T7: a reply to an expired or cancelled question never resumes the asker."""
    team = before.teams.get(command.team_id)
    exchange = team.exchanges.get(command.question_id) if team else None
    if exchange is None or exchange.state is QuestionState.OPEN:
        return
    for effect in outcome.effects:
        if isinstance(effect, SubmitNotice) and effect.kind is NoticeKind.ANSWER:
            yield "T7", f"late reply to {exchange.id!r} produced a continuation notice"
