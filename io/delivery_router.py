# From the owner's ledger to the desks: every team effect made durable is routed by core/routing.py (the
# function the model checker explores through core/system.py) to the desk of each machine it concerns,
# handed over `team_delivery` to this machine's desk runner or, for a paired machine, to that machine's desk
# through the sealed relay (io/remote.py). Split from the daemon so where a request goes, and what is said
# again after a crash or a pairing, is read in one place; the routing decisions themselves are core's.
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from pathlib import Path

import attrs
import trio

from harness.core import delivery as d
from harness.core.effects import SubmitNotice, WithdrawNotice
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import Limits
from harness.core.queries import delivery_view
from harness.core.records import Ledger, NoticeKind
from harness.core.routing import Known, RestatementPart, Route, Translate, restatement_routes, route
from harness.core.system import NoticeContent, desk_command, notice_content, refused_reason
from harness.core.team import RestatedEffect
from harness.io import home as homes
from harness.io.desk_runner import DeskRunner
from harness.io.ledger_runner import DeskEffect, LedgerRunner
from harness.io.remote import RemoteNode
from harness.io.team_delivery import DeliveryReport, OwnerRequest, TeamDelivery, command_prefix
from harness.io.team_delivery import request as delivery_request

# A request for the desk of this machine id.
DeliveryWork = tuple[str, OwnerRequest]
# The reason an owner shows for a notice to a machine it has no route to (not paired, or no relay yet).
UNPAIRED = "unpaired"


def _held_moot(request: d.Submit | d.Withdraw | SubmitNotice | WithdrawNotice, desk: d.Desk) -> bool:
    """What the desk's own table says of a submit (it holds the notice) or a withdrawal (it never held it, or
    holds it in a state a withdrawal leaves as it is: written, withdrawn, expired) of a notice."""
    held = desk.notices.get(request.notice_id)
    if isinstance(request, d.Submit | SubmitNotice):
        return held is not None
    return held is None or d.DELIVERY_TRANSITIONS[(held.state, d.DeliveryEvent.WITHDRAW)] is held.state


def _refused_again(recorded: str, refused: Rejected | None) -> bool:
    """Whether the desk's refusal is the one the owner records, for a reason time cannot lift while this
    daemon runs: not a full queue (an agent's queue drains), never a stopped desk's."""
    return (
        refused is not None
        and refused.code is not ErrorCode.CORRUPT_STATE
        and refused.bound != "queued_per_agent"
        and recorded == refused_reason(refused)
    )


class DeliveryRouter:
    """The delivery worker of one daemon and the destinations it knows: this desk and the paired machines."""

    def __init__(
        self,
        home: Path,
        machine_id: str,
        ledger: LedgerRunner,
        desk: DeskRunner,
        node: RemoteNode,
        *,
        log: Callable[[str], None],
    ) -> None:
        self.home = home
        self.machine_id = machine_id
        self.ledger = ledger
        self.desk = desk
        self.node = node
        self._log = log
        # Unbounded on purpose: the ledger's finisher must never wait for the delivery worker, which itself
        # sends reports back into the ledger queue; a bound here could close that loop into a deadlock.
        self._send, self._receive = trio.open_memory_channel[DeliveryWork](math.inf)
        self._unrestated: list[str] = []  # teams whose owed notices the start has yet to restate, in order
        # Set once this machine's desk has applied the start's guards (`restate_guards`): from then on it may
        # write. Counted in requests queued for, and handed to, this desk.
        self.guards_applied = trio.Event()
        self._guards_end: int | None = None
        self._sent_here = self._handed_here = 0

    @property
    def limits(self) -> Limits:
        return self.ledger.limits

    def route(self, ledger: Ledger, effect: DeskEffect, at: int) -> None:
        """Queue the desk request of a durable effect for each machine it concerns (core `route`)."""
        for routed in route(ledger, (effect,), self.known, self._translate(ledger, at)):
            self.send(routed.machine_id, routed.request)

    def send(self, machine_id: str, command: OwnerRequest) -> None:
        """Queue a request for `machine_id`'s desk; ClosedResourceError once the ledger has drained and the
        worker finishes."""
        self._send.send_nowait((machine_id, command))
        if machine_id == self.machine_id:
            self._sent_here += 1

    @property
    def known(self) -> Known:
        """What routing knows here: this machine, and the paired machines handed notices of each team."""
        return Known(self.machine_id, self.node.holders)

    def _translate(self, ledger: Ledger, at: int) -> Translate:
        """Effects into desk requests, notices rendered with this machine's command prefixes."""
        prefix = partial(self.command_prefix, ledger)
        return partial(desk_command, ledger, at=at, limits=self.limits, prefix=prefix)

    def close(self) -> None:
        """No more requests: the worker hands over what is queued, then stops the desk."""
        self._send.close()

    def content_of(self, submit: d.Submit) -> NoticeContent | None:
        """What a notice owed to a paired machine's agent says, from the ledger (None: its team is gone)."""
        durable = self.ledger.durable
        team = durable.teams.get(submit.team_id)
        if team is None or self.ledger.unavailable.get(submit.team_id):
            return None
        return notice_content(durable, submit)

    def command_prefix(self, ledger: Ledger, team_id: str, member_key: str) -> str:
        """The shell prefix a member's introduction teaches: for a member on this machine, this data directory
        and the member's key file, written (durably) here before the prefix can reach any desk; a member on a
        paired machine calls its own daemon, which carries the call here (`--machine`)."""
        team = ledger.teams.get(team_id)
        member_id = None if team is None else team.keys.get(member_key)
        member = None if team is None or member_id is None else team.members.get(member_id)
        if member is None:  # a revoked key (core passes "REVOKED"): there is no file to name
            return command_prefix(self.home, team_id, Path("REVOKED"))
        if member.machine_id != self.machine_id:
            # Its machine renders the introduction itself and keeps the key in a file of its own
            # (io/remote.py); what the owner can say is the form, with that file to be named there.
            return f"harness team --machine {self.machine_id} --team {team_id} --key-file KEY_FILE"
        try:
            key_file = homes.write_member_key(self.home, team_id, member.id, member_key)
        except OSError as error:  # the next start writes it again (restatement asks for every prefix)
            key_file = homes.member_key_path(self.home, team_id, member.id)
            self._log(f"cannot write the key file {key_file}: {error}")
        return command_prefix(self.home, team_id, key_file)

    def restate(self, machine: str) -> None:
        """Tell a machine paired since start its part of what the ledgers say it must have (core
        `restatement_routes`), until now owed `unpaired`.

        A crash can fall between a ledger change made durable and a destination's durable receipt of any of
        its effects (a submit, a withdrawal, a hold). Every desk command is idempotent, so restating what a
        desk has changes nothing there; paired machines get theirs in few sealed requests."""
        self._restate(list(self.ledger.durable.teams), machine, RestatementPart.ALL)

    def restate_guards(self) -> None:
        """The start's restatement, first part, before the daemon listens: every team's hold or release, and
        the withdrawal of its removed members and ended questions, to every destination. A desk whose journal
        is behind the ledger's never writes what the ledger already ended, nor a paused team's notice, however
        long the second part takes to reach its team."""
        self._unrestated = list(self.ledger.durable.teams)
        self._restate(self._unrestated, None, RestatementPart.GUARDS)
        self._guards_end = self._sent_here
        self._note_handed(0)

    async def restate_notices_gradually(self) -> None:
        """The start's restatement, second part, while the daemon serves: each team's owed notices in turn,
        derived from the ledger's durable state of that moment and handed over whole before any other task
        runs. A request served in between is restated as it changed the team (a question cancelled by then is
        never submitted again), or routed after the team's part, never inside it. At the seed's bounds this is
        seconds of CPU (rendering each owed notice) that a daemon no longer spends before it listens."""
        while self._unrestated:
            await self.before_team(self._unrestated[0])
            self._restate(self._unrestated[:1], None, RestatementPart.NOTICES)
            del self._unrestated[0]

    @property
    def teams_to_restate(self) -> int:
        """How many teams' owed notices the start has yet to restate (`harness daemon status`)."""
        return len(self._unrestated)

    async def before_team(self, team_id: str) -> None:
        """Where other tasks run before a team's owed notices are restated (a test holds one back)."""
        await trio.sleep(0)

    def _restate(self, team_ids: list[str], machine: str | None, part: RestatementPart) -> None:
        durable = self.ledger.durable
        translate = self._translate(durable, self.ledger.clock())
        desk = self.desk.desk
        remote: dict[str, list[OwnerRequest]] = {}
        for team_id in team_ids:
            team = durable.teams.get(team_id)
            if team is None or team_id in self.ledger.unavailable:
                continue
            moot = partial(self._moot_effect, desk=desk) if machine is None else lambda effect: False
            routes = restatement_routes(
                durable, team, self.known, translate, self.limits, part=part, moot_here=moot
            )
            for routed in routes:
                if routed.machine_id != self.machine_id:
                    remote.setdefault(routed.machine_id, []).append(routed.request)
                elif machine is None and not self._moot_here(routed, desk):
                    self.send(self.machine_id, routed.request)
        for other, owed in remote.items():
            if machine is not None and other != machine:
                continue
            if self.node.peer(other) is not None:
                self.node.restate(other, owed)
            else:  # no route: its notices show `queued`, reason `unpaired`, until it is paired
                for request in owed:
                    if isinstance(request, d.Submit) and self._never_left(request):
                        self.send(other, request)

    def _moot_here(self, routed: Route, desk: d.Desk) -> bool:
        """A request that would change nothing on this machine's desk, replayed before any restatement, nor
        in the owner's view: a notice it holds already, the withdrawal of one it never held (a desk skips
        unknown notices) or holds in a state a withdrawal leaves as it is (written, withdrawn, expired: the
        desk's own table says so), or a submit it would refuse again, as the owner records
        (`_refused_as_recorded`).
        A stopped desk answers every request with its own report: nothing is moot there. At the seed's
        bounds these are most of a restart's restatement: every finished exchange is withdrawn, and a full
        desk refuses every answer notice."""
        request = routed.request
        if self.desk.unavailable is not None:
            return False
        if isinstance(request, d.Submit):
            return _held_moot(request, desk) or self._refused_as_recorded(request, desk)
        return isinstance(request, d.Withdraw) and _held_moot(request, desk)

    def _moot_effect(self, effect: RestatedEffect, desk: d.Desk) -> bool:
        """`_moot_here` of a restated effect before it is routed and its notice rendered, as far as this
        desk's table tells and, for a submit it does not hold, as far as the desk refuses it before it looks
        at the text (core/routing.py `restatement_routes`, for a team only this machine hears). At the seed's
        bounds most of a start's restated submits are answer notices a full desk refused: none is rendered."""
        if self.desk.unavailable is not None or not isinstance(effect, SubmitNotice | WithdrawNotice):
            return False
        if _held_moot(effect, desk):
            return True
        if not isinstance(effect, SubmitNotice) or effect.machine_id != desk.machine_id:
            return False
        recorded = self._recorded_refusal(effect)
        if recorded is None:
            return False
        at = self.desk.stamp()
        refused = d.admission_refusal(desk, effect.notice_id, effect.expires_at, at, self.limits)
        return _refused_again(recorded, refused)

    def _refused_as_recorded(self, submit: d.Submit, desk: d.Desk) -> bool:
        """Whether the desk would refuse `submit` (a notice it does not hold), stamped as it stamps it, for a
        reason time cannot lift while this daemon runs (a full desk only fills; an expiry or a size stays),
        and the owner already records exactly that refusal, so that its report would change nothing."""
        recorded = self._recorded_refusal(submit)
        if recorded is None:
            return False
        stepped = d.step(desk, attrs.evolve(submit, at=self.desk.stamp()), self.limits)
        return _refused_again(recorded, stepped if isinstance(stepped, Rejected) else None)

    def _recorded_refusal(self, submit: d.Submit | SubmitNotice) -> str | None:
        """The reason of the refusal the owner records for the notice, if it records one; never for an
        introduction, whose view the member's re-introductions share and whose reports may have moved it."""
        if submit.kind is NoticeKind.INTRODUCTION:
            return None
        team = self.ledger.durable.teams.get(submit.team_id)
        view = None if team is None else delivery_view(team, submit.notice_id)
        return view.reason if view is not None and view.state == d.DeliveryState.REJECTED.value else None

    def _never_left(self, submit: d.Submit) -> bool:
        """Whether the owner's view of a notice says it never got past `queued` (a later state, reported by
        a machine since unpaired, is still the truest word on it)."""
        team = self.ledger.durable.teams.get(submit.team_id)
        view = None if team is None else delivery_view(team, submit.notice_id)
        return view is None or view.state == d.DeliveryState.QUEUED.value

    def destination(self, machine_id: str) -> TeamDelivery | None:
        """Where a request for `machine_id` goes; None: no route to that machine (not paired)."""
        if machine_id == self.machine_id:
            return self.desk
        return self.node.destination(machine_id)

    async def run(self) -> None:
        """The delivery worker: hands every queued request over, until `close`. A machine without a route
        gets nothing: its notices wait, visibly, and pairing it again restates the teams it holds. What is
        queued for this machine's desk at once (the effects of one ledger batch) goes in as one desk batch:
        one durable append for all of it."""
        async for first in self._receive:
            work = [first, *self._queued()]
            local = [command for machine_id, command in work if machine_id == self.machine_id]
            if local:
                await self.desk.requests(local)
                self._note_handed(len(local))
            for machine_id, command in work:
                if machine_id == self.machine_id:
                    continue
                destination = self.destination(machine_id)
                if destination is not None:
                    await delivery_request(destination, command)
                elif isinstance(command, d.Submit):  # owed, visibly waiting for a route to its machine
                    queued = d.DeliveryState.QUEUED.value
                    owed = DeliveryReport(command.team_id, command.notice_id, queued, UNPAIRED)
                    # This daemon's own word, said again at every start while the view never got past
                    # `queued` (`_restate`): it rides the team's next append, as this desk's reports do.
                    await self.ledger.report(owed, rides=True)
        # Every request of an accepted command was handed over; now the desk may stop looking.
        self.desk.stop()

    def _note_handed(self, requests: int) -> None:
        self._handed_here += requests
        if self._guards_end is not None and self._handed_here >= self._guards_end:
            self.guards_applied.set()

    def _queued(self) -> list[DeliveryWork]:
        """The requests already queued, without waiting for more."""
        queued: list[DeliveryWork] = []
        while True:
            try:
                queued.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return queued
