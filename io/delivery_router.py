# From the owner's ledger to the desks: every team effect made durable becomes the desk command of its
# destination (the routing of `harness.core.system`), handed over `team_delivery` to this machine's desk
# runner, or, for a member on a paired machine, to that machine's desk through the sealed relay
# (io/remote.py). Team-wide requests (hold, release, withdrawals) also fan out to every paired machine holding
# notices of the team. Split from the daemon so where a request goes, and what is said again after a crash
# or a pairing, is read in one place.
from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio

from harness.core import delivery as d
from harness.core.limits import Limits
from harness.core.queries import delivery_view
from harness.core.records import Ledger, TeamState
from harness.core.system import NoticeContent, desk_command, notice_content
from harness.core.team import restatement
from harness.io import home as homes
from harness.io.desk_runner import DeskRunner
from harness.io.ledger_runner import DeskEffect, LedgerRunner
from harness.io.remote import RemoteNode
from harness.io.team_delivery import DeliveryReport, OwnerRequest, TeamDelivery, command_prefix
from harness.io.team_delivery import request as delivery_request

# A request for the destination on this machine id, or (None) for every destination.
DeliveryWork = tuple[str | None, OwnerRequest]
# The reason an owner shows for a notice to a machine it has no route to (not paired, or no relay yet).
UNPAIRED = "unpaired"


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

    @property
    def limits(self) -> Limits:
        return self.ledger.limits

    def route(self, ledger: Ledger, effect: DeskEffect, at: int) -> None:
        """Queue the desk command of a durable effect for its destination (a Submit) or for every one."""
        command = desk_command(ledger, effect, at, self.limits, partial(self.command_prefix, ledger))
        self.send(command.machine_id if isinstance(command, d.Submit) else None, command)

    def send(self, machine_id: str | None, command: OwnerRequest) -> None:
        """Queue a request for `machine_id`'s desk (None: every destination); ClosedResourceError once the
        ledger has drained and the worker finishes."""
        self._send.send_nowait((machine_id, command))

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

    def restate(self, machine: str | None = None) -> None:
        """Tell destinations again what the ledgers say they must have (core `restatement`): on start every
        destination, and a machine paired since start (`machine`) its notices, until now owed `unpaired`.

        A crash can fall between a ledger change made durable and a destination's durable receipt of any of
        its effects (a submit, a withdrawal, a hold). Every desk command is idempotent, so restating what a
        desk has changes nothing there; paired machines get theirs in few sealed requests."""
        at = self.ledger.clock()
        durable = self.ledger.durable
        held = self.desk.desk.notices
        remote: dict[str, list[OwnerRequest]] = {}
        for team_id, team in durable.teams.items():
            if team_id in self.ledger.unavailable:
                continue
            prefix = partial(self.command_prefix, durable)
            commands = [
                desk_command(durable, effect, at, self.limits, prefix)
                for effect in restatement(team, self.limits)
            ]
            submitted = {c.machine_id for c in commands if isinstance(c, d.Submit)} - {self.machine_id}
            team_wide = sorted(submitted.union(self.node.holders(team_id)))
            for command in commands:
                if not isinstance(command, d.Submit):
                    if machine is None:
                        self.send(self.machine_id, command)  # the local desk only
                    for other in team_wide:
                        remote.setdefault(other, []).append(command)
                elif command.machine_id == self.machine_id:
                    if machine is None and command.notice_id not in held:
                        self.send(self.machine_id, command)
                else:
                    remote.setdefault(command.machine_id, []).append(command)
        for other, owed in remote.items():
            if machine is not None and other != machine:
                continue
            if self.node.peer(other) is not None:
                self.node.restate(other, owed)
            else:  # no route: its notices show `queued`, reason `unpaired`, until it is paired
                for request in owed:
                    if isinstance(request, d.Submit) and self._never_left(request):
                        self.send(other, request)

    def _never_left(self, submit: d.Submit) -> bool:
        """Whether the owner's view of a notice says it never got past `queued` (a later state, reported by
        a machine since unpaired, is still the truest word on it)."""
        team = self.ledger.durable.teams.get(submit.team_id)
        view = None if team is None else delivery_view(team, submit.notice_id)
        return view is None or view.state == d.DeliveryState.QUEUED.value

    def destination(self, machine_id: str | None) -> TeamDelivery | None:
        """Where a request for `machine_id` goes; None: no route to that machine (not paired)."""
        if machine_id is None or machine_id == self.machine_id:
            return self.desk
        return self.node.destination(machine_id)

    async def run(self) -> None:
        """The delivery worker: hands every queued request over, until `close`."""
        async for machine_id, command in self._receive:
            destination = self.destination(machine_id)
            if destination is not None:
                if isinstance(command, d.Submit) and machine_id not in self.node.holders(command.team_id):
                    team = self.ledger.durable.teams.get(command.team_id)
                    if team is not None and team.state is TeamState.PAUSED:
                        # A machine new to a paused team gets its hold first, so nothing is written; one
                        # that holds the team already was told by the pause itself (fan-out).
                        await delivery_request(destination, d.Hold(command.at, command.team_id))
                await delivery_request(destination, command)
            elif isinstance(command, d.Submit):  # owed, visibly waiting for a route to its machine
                queued = d.DeliveryState.QUEUED.value
                await self.ledger.report(DeliveryReport(command.team_id, command.notice_id, queued, UNPAIRED))
            if machine_id is None:  # team-wide: paired desks holding its notices
                await self.node.fan_out(command)
        # Every request of an accepted command was handed over; now the desk may stop looking.
        self.desk.stop()
