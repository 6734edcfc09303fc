# The `team` RPC reads with consequences at a desk: a member's inbox, status and wait show questions and
# answers, and what a member has read makes its unsent notices moot, so its machine's desk is told (after the
# read); `delivery_check` asks a desk itself what became of a notice, `delivery_inspect` and
# `delivery_resolve` let the owner look for evidence that an unconfirmed notice landed and then say so
# (never automatic), and `usage` reads this machine's desk beside the ledger. Split from the other actions
# because these remember what each member was shown and talk to destinations, which the others never do.
from __future__ import annotations

import contextlib
from typing import Any

import trio

from harness.core import delivery as d
from harness.core.codec import exchange_view
from harness.core.effects import notice_id, parse_notice_id
from harness.core.errors import ErrorCode, Rejected
from harness.core.queries import (
    WARN_PERCENT,
    BoundUse,
    decide_wait,
    desk_usage,
    inbox,
    status,
    visible_exchange,
    waiter_for,
)
from harness.core.queries import usage as ledger_usage
from harness.core.records import Exchange, Membership, NoticeKind, QuestionState, Team
from harness.core.system import AtDesk, System, answer_retrieved_action, inbox_read_action
from harness.io.delivery_router import UNPAIRED, DeliveryRouter
from harness.io.desk_runner import DeskRunner
from harness.io.remote import RemoteRefused, RemoteUnavailable, RemoteUncertain
from harness.io.rpc import BAD_REQUEST, Request
from harness.io.team_access import ActionError, Handler, TeamAccess, carried_to, rejected_error

DEFAULT_WAIT_SECONDS = 30.0
MAX_WAIT_SECONDS = 3600.0

E = ErrorCode


def _answered_at(exchange: Exchange) -> int:
    return exchange.answer.at if exchange.answer is not None else 0


# What the owner may do after an inspection: both are explicit, neither is ever taken automatically.
RESOLUTIONS = {
    "landed": "delivery_resolve landed=true: the notice reached the agent (delivered)",
    "lost": "delivery_resolve landed=false: it never did; it is written once more under a new write id, once",
}
# The two safe human actions on a crash leftover; the daemon takes neither.
LEFTOVER_ACTIONS = (
    "submit it: press Enter in the agent's pane (the notice then shows as accepted)",
    "clear it: empty the agent's composer (the owner may then resolve the notice as lost)",
)


def leftover_view(leftover_id: str) -> dict[str, Any]:
    return {"noticeId": leftover_id, "actions": list(LEFTOVER_ACTIONS)}


def _bound_view(bound: BoundUse) -> dict[str, Any]:
    return {
        "bound": bound.bound,
        "use": bound.use,
        "limit": bound.limit,
        "ratio": round(bound.ratio, 4),
        "warning": bound.warning,
        "subject": bound.subject,
        "advice": bound.advice,
    }


class TeamReads:
    """inbox, status, wait, delivery_check and usage, and what each member was last shown."""

    def __init__(self, access: TeamAccess, router: DeliveryRouter) -> None:
        self.access = access
        self.ledger = access.ledger
        self.router = router
        # (team, membership) -> the open questions to it last shown in an inbox or wait reply: read before its
        # desk's report reaches the ledger (or when it never does: an unpaired machine). Memory only: after a
        # restart a wait breaks once more on them, the safe side.
        self._shown: dict[tuple[str, str], frozenset[str]] = {}

    def handlers(self) -> dict[str, Handler]:
        return {
            "inbox": self.inbox,
            "status": self.status,
            "wait": self.wait,
            "delivery_check": self.delivery_check,
            "delivery_inspect": self.delivery_inspect,
            "delivery_resolve": self.delivery_resolve,
            "usage": self.usage,
        }

    def _tell_desk(self, action: AtDesk | None) -> None:
        """A member's read makes unsent notices moot; its machine's desk learns it (after the read)."""
        if action is None:
            return
        command = action.command
        assert isinstance(command, d.InboxRead | d.AnswerRetrieved)
        carried = carried_to(action.machine_id)
        if carried is not None:
            carried.append(command)  # also with the reply to the member's machine (answer_frame)
        with contextlib.suppress(trio.ClosedResourceError):  # shutting down: the notices stay queued
            self.router.send(action.machine_id, command)

    def _answer_seen(self, team: Team, viewer: Membership, exchange: Exchange) -> None:
        """The asker retrieved the answer: its continuation notice, if still unsent, is no longer needed."""
        if exchange.from_ == viewer.id and exchange.answer is not None:
            durable = System(self.ledger.durable)
            self._tell_desk(answer_retrieved_action(durable, team.id, exchange.id, self.ledger.clock()))

    async def inbox(self, request: Request) -> object:
        team = self.access.team(request)
        viewer = self.access.viewer(team, request)
        if viewer is None:  # the owner sees every open question and the latest answers of the team
            everything = status(team, None)
            questions = tuple(e for e in everything if e.state is QuestionState.OPEN)
            answered = sorted((e for e in everything if e.answer is not None), key=lambda e: -_answered_at(e))
            answers = tuple(answered[: self.ledger.limits.recent_answers])
        else:
            box = inbox(team, viewer, self.ledger.limits)
            questions, answers = box.questions, box.answers
            self._shown[(team.id, viewer.id)] = frozenset(e.id for e in questions)
            durable = System(self.ledger.durable)
            self._tell_desk(inbox_read_action(durable, team.id, viewer.id, self.ledger.clock()))
        return {
            "teamId": team.id,
            "revision": team.revision,
            "questions": [exchange_view(e) for e in questions],
            "answers": [exchange_view(e) for e in answers],
        }

    async def status(self, request: Request) -> object:
        team = self.access.team(request)
        viewer = self.access.viewer(team, request)
        question_id = request.opt_text("questionId")
        if question_id is None:
            return {
                "teamId": team.id,
                "revision": team.revision,
                "exchanges": [exchange_view(e) for e in status(team, viewer)],
            }
        exchange = visible_exchange(team, viewer, question_id)
        if isinstance(exchange, Rejected):
            raise rejected_error(exchange)
        if viewer is not None:
            self._answer_seen(team, viewer, exchange)
        return exchange_view(exchange)

    async def delivery_check(self, request: Request) -> object:
        """Ask the destination's desk itself what became of a question's notice (or with notice "answer", of
        its continuation), through the relay for a member on a paired machine. What it says is recorded as
        its report, so a stale owner's view heals; nothing is ever sent again."""
        team = self.access.team(request)
        question_id = request.text("questionId")
        notice_kind = request.opt_text("notice") or NoticeKind.QUESTION.value
        if notice_kind not in (NoticeKind.QUESTION.value, NoticeKind.ANSWER.value):
            raise ActionError(BAD_REQUEST, f'notice is "question" or "answer", not {notice_kind!r}')
        kind = NoticeKind(notice_kind)
        exchange = team.exchanges.get(question_id)
        if exchange is None:
            raise ActionError(E.NOT_FOUND.value, f"no {kind} notice of question {question_id!r}")
        member = team.members[exchange.to if kind is NoticeKind.QUESTION else exchange.from_]
        notice = notice_id(team.id, exchange.id, kind)
        checked: dict[str, Any] = {"noticeId": notice, "machineId": member.machine_id}
        destination = self.router.destination(member.machine_id)
        if destination is None:
            return {**checked, "asked": False, "error": UNPAIRED, "detail": "that machine is not paired"}
        try:
            reports = await destination.status(team.id, [notice])
        except (RemoteUnavailable, RemoteRefused) as error:
            return {**checked, "asked": False, "error": error.code, "detail": error.detail}
        except RemoteUncertain as error:
            return {**checked, "asked": False, "error": "uncertain", "detail": str(error)}
        # The machine answers for the one notice asked about: a report of anything else (another team's
        # notice) is not its to make here, and is dropped.
        reports = [r for r in reports if (r.team_id, r.notice_id) == (team.id, notice)]
        for report in reports:
            await self.ledger.report(report)
        held = next(iter(reports), None)
        delivery = None
        if held is not None:
            times = {"startedAt": held.started_at, "seenAt": held.seen_at}
            delivery = {"state": held.state, "reason": held.reason, **times}
        checked.update(asked=True, held=held is not None, delivery=delivery)
        local = destination is self.router.desk
        leftover = self.router.desk.leftovers.get(member.agent_id) if local else None
        if held is not None and held.reason == d.Reason.LEFTOVER.value and leftover is not None:
            checked["leftover"] = leftover_view(leftover)
        if held is not None and held.state == d.DeliveryState.UNCONFIRMED.value:
            checked["next"] = f"inspect {notice}, then resolve {notice} --landed or --lost (never automatic)"
        return checked

    def _local_notice(self, request: Request) -> tuple[Team, str, DeskRunner]:
        """The team, the notice the owner names (a notice id, or a question id for its question notice) and
        this machine's desk, which must hold it: only the machine that runs the agent can look at its pane."""
        team = self.access.team(request)
        named = request.text("noticeId")
        parsed = parse_notice_id(named)
        if parsed is None:
            if named not in team.exchanges:
                raise ActionError(E.NOT_FOUND.value, f"no notice or question {named!r} in team {team.id!r}")
            named = notice_id(team.id, named, NoticeKind.QUESTION)
        elif parsed[0] != team.id:
            raise ActionError(E.NOT_FOUND.value, f"notice {named!r} is not of team {team.id!r}")
        desk = self.router.desk
        if named not in desk.desk.notices:
            detail = f"this machine's desk holds no notice {named!r}; look on the machine that runs the agent"
            raise ActionError(E.NOT_FOUND.value, detail)
        return team, named, desk

    async def delivery_inspect(self, request: Request) -> object:
        """Owner: look in the agent's pane for evidence that a written notice landed. A read: nothing is
        sent, nothing is recorded; the owner resolves it afterwards with `delivery_resolve`."""
        team, named, desk = self._local_notice(request)
        found = await desk.inspect(team.id, named)
        if isinstance(found, Rejected):
            raise rejected_error(found)
        return {**found.to_json(), "actions": RESOLUTIONS}

    async def delivery_resolve(self, request: Request) -> object:
        """Owner: the notice landed (`landed: true`), or its unconfirmed write was lost (`landed: false`): one
        more write of it under a new write id, once, and only while it is still owed."""
        landed = request.opt_bool("landed")
        if landed is None:
            raise ActionError(BAD_REQUEST, "delivery_resolve: 'landed' must be true or false")
        team, named, desk = self._local_notice(request)
        if not landed:
            moot = d.loss_moot(team, desk.desk.notices[named])
            if moot is not None:
                detail = f"{moot}: the notice is not written again; the member reads it with inbox/status"
                raise ActionError(E.CONFLICT.value, detail)
        resolved = await desk.resolve(team.id, named, landed=landed)
        if isinstance(resolved, Rejected):
            raise rejected_error(resolved)
        return {
            "noticeId": resolved.id,
            "state": resolved.state.value,
            "reason": None if resolved.reason is None else resolved.reason.value,
            "writeId": d.write_id(resolved),
            "lostAt": resolved.lost_at,
            "lostStartedAt": resolved.lost_started_at,
        }

    async def usage(self, request: Request) -> object:
        """Every bound the team's work meets, with its use, so that it is seen before it bites: the ledger's,
        and those of this machine's desk (a paired machine's desk is not asked)."""
        team = self.access.team(request)
        viewer = self.access.viewer(team, request)
        limits = self.ledger.limits
        ledger = ledger_usage(self.ledger.durable, team.id, limits, self.ledger.clock(), viewer)
        if isinstance(ledger, Rejected):
            raise rejected_error(ledger)
        desk = self.router.desk.desk
        bounds = (*ledger, *desk_usage(desk, team, limits, viewer))
        return {
            "teamId": team.id,
            "machineId": desk.machine_id,
            "warnPercent": WARN_PERCENT,
            "bounds": [_bound_view(bound) for bound in bounds],
        }

    async def wait(self, request: Request) -> object:
        seconds = request.opt_number("seconds")
        seconds = DEFAULT_WAIT_SECONDS if seconds is None else seconds
        if not 0 <= seconds <= MAX_WAIT_SECONDS:
            detail = f"wait seconds must be 0 to {MAX_WAIT_SECONDS:g}"
            raise ActionError(E.BOUND_EXCEEDED.value, detail, bound="wait_seconds")
        question_id = request.text("questionId")
        clock = self.ledger.clock
        since = clock()
        until = since + round(seconds * 1000)
        while True:
            team = self.access.team(request)
            viewer = self.access.viewer(team, request)
            exchange = visible_exchange(team, viewer, question_id)
            if isinstance(exchange, Rejected):
                raise rejected_error(exchange)
            waiter = waiter_for(team, viewer, exchange)
            seen = self._shown.get((team.id, waiter), frozenset())
            decision = decide_wait(team, waiter, exchange, clock(), until, since=since, seen=seen)
            if decision is not None:
                if viewer is not None:
                    self._answer_seen(team, viewer, decision.exchange)
                    if decision.incoming:  # the waiter read these questions in the reply
                        ids = tuple(notice_id(team.id, e.id, NoticeKind.QUESTION) for e in decision.incoming)
                        self._tell_desk(AtDesk(viewer.machine_id, d.InboxRead(clock(), ids)))
                        self._shown[(team.id, viewer.id)] = frozenset(e.id for e in decision.incoming)
                return {
                    "reason": decision.reason.value,
                    "exchange": exchange_view(decision.exchange),
                    "incoming": [exchange_view(e) for e in decision.incoming],
                    "news": list(decision.news),
                }
            changed = self.ledger.changed(team.id)
            with trio.move_on_after(max(0, until - clock() + 1) / 1000):
                await changed.wait()
