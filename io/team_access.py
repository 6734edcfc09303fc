# What every `team` action handler shares, so each handler module holds only its own actions: the error a
# request is answered with, which durable team a request may see (the owner of a paired machine only the
# teams it has a member in), and a command's durable outcome.
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Iterator

from harness.core.commands import TeamCommand
from harness.core.errors import ErrorCode, Rejected
from harness.core.outcome import Accepted
from harness.core.queries import reader
from harness.core.records import Ledger, Membership, Team
from harness.core.remote_grant import observable
from harness.io.ledger_runner import LedgerRunner, ShuttingDown
from harness.io.rpc import Request
from harness.io.team_delivery import OwnerRequest

E = ErrorCode
# One RPC action: its request -> its result (raises ActionError for an error frame).
Handler = Callable[[Request], Awaitable[object]]


class ActionError(Exception):
    """A request the daemon answers with an error frame (a protocol error, not a daemon fault)."""

    def __init__(
        self, code: str, detail: str, operation_id: str | None = None, bound: str | None = None
    ) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail if bound is None else f"{detail} (bound {bound})"
        self.operation_id = operation_id
        self.bound = bound


def rejected_error(rejected: Rejected, operation_id: str | None = None) -> ActionError:
    return ActionError(rejected.code.value, rejected.detail, operation_id, rejected.bound)


# While a paired machine's frame is answered: that machine, and the desk commands its request meant for it.
_CARRIED: contextvars.ContextVar[tuple[str, list[OwnerRequest]] | None] = contextvars.ContextVar(
    "carried", default=None
)


@contextlib.contextmanager
def carrying(origin: str) -> Iterator[list[OwnerRequest]]:
    """Answer requests as a frame from paired machine `origin`; collects the desk commands meant for it."""
    carried: list[OwnerRequest] = []
    token = _CARRIED.set((origin, carried))
    try:
        yield carried
    finally:
        _CARRIED.reset(token)


def carried_to(machine_id: str) -> list[OwnerRequest] | None:
    """The desk commands travelling with the reply to `machine_id`, when this request came from there."""
    carrier = _CARRIED.get()
    return carrier[1] if carrier is not None and carrier[0] == machine_id else None


def observer(request: Request) -> str | None:
    """The paired machine whose owner reads through this request (a carried frame without a member key),
    or None for a local caller or a member."""
    carrier = _CARRIED.get()
    return carrier[0] if carrier is not None and request.member_key is None else None


def team_id(request: Request) -> str:
    assert request.team_id is not None
    return request.team_id


class TeamAccess:
    """The durable teams of one ledger as requests may see them, and commands' outcomes as answers."""

    def __init__(self, ledger: LedgerRunner) -> None:
        self.ledger = ledger

    def team(self, request: Request) -> Team:
        wanted = team_id(request)
        seer = observer(request)
        if wanted in self.ledger.unavailable and seer is None:
            raise ActionError(E.CORRUPT_STATE.value, self.ledger.unavailable[wanted])
        team = self.ledger.durable.teams.get(wanted)
        if team is None or (seer is not None and not observable(team, seer)):
            raise ActionError(E.NOT_FOUND.value, f"no team {wanted!r}")
        return team

    def viewer(self, team: Team, request: Request) -> Membership | None:
        viewer = reader(team, request.member_key)
        if isinstance(viewer, Rejected):
            raise rejected_error(viewer)
        return viewer

    async def submit(self, command: TeamCommand) -> Accepted[Ledger] | Rejected:
        """The command's durable outcome (shielded: once sent, it finishes)."""
        try:
            return await self.ledger.submit(command)
        except ShuttingDown:
            detail = "the daemon is shutting down; retry after it restarts"
            raise ActionError(E.OFFLINE.value, detail) from None

    async def run(self, command: TeamCommand, operation_id: str | None = None) -> object:
        outcome = await self.submit(command)
        if isinstance(outcome, Rejected):
            raise rejected_error(outcome, operation_id)
        return outcome.result
