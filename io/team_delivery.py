# `team_delivery`: the owner-to-destination interface of team.v1. The owner's ledger decides that a notice is
# owed; the destination's delivery desk decides when its terminal may take it and reports what it observed.
# Both sides speak only through this small interface, even while they share one process, so the remote
# transport (a sealed relay) slots in without either reducer changing. The requests are the desk's own
# commands (built by `harness.core.system.desk_command`, the routing the model checker explores), so no
# side re-derives what the other meant.
from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol

import attrs

from harness.core import delivery as d
from harness.core import system

# What the owner sends a destination (a desk's own observations and write reports never travel): the same
# requests the composed system routes, and the model checker carries over its lossy link.
OwnerRequest = system.OwnerRequest


@attrs.frozen
class DeliveryReport:
    """What a destination observed about one notice; the owner records it with a RecordDelivery command."""

    team_id: str
    notice_id: str
    state: str
    reason: str | None
    # Asked of a desk (`status`), not pushed: when the notice's one write began and when the shell saw the
    # idle screen that licensed it (None: not written).
    started_at: int | None = None
    seen_at: int | None = None


Reporter = Callable[[DeliveryReport], Awaitable[None]]


class TeamDelivery(Protocol):
    """The destination side as the owner sees it. Every method is idempotent; reports arrive through the
    reporter the destination was built with, in the order the destination observed them."""

    async def submit(self, command: d.Submit) -> None: ...

    async def status(self, team_id: str, notice_ids: Sequence[str]) -> list[DeliveryReport]:
        """What the destination holds of these notices now (one report each it holds). A destination that
        cannot be asked raises (io/remote.py: RemoteUnavailable, RemoteUncertain, RemoteRefused)."""

    async def hold(self, command: d.Hold) -> None:
        """The team is paused: its unsent notices wait, held."""

    async def release(self, command: d.Release) -> None:
        """The team resumed: its held notices are owed again (none was written while held)."""

    async def cancel(self, command: d.Withdraw | d.WithdrawMember | d.WithdrawTeam) -> None:
        """Withdraw unsent notices: one, all of one membership, or all of the team."""

    async def consume(self, command: d.InboxRead | d.AnswerRetrieved) -> None:
        """The member read these in its inbox, or the asker retrieved an answer: unsent notices are moot."""


async def request(delivery: TeamDelivery, command: OwnerRequest) -> None:
    """Send one owner request to `delivery` by the `team_delivery` action it belongs to."""
    if isinstance(command, d.Submit):
        await delivery.submit(command)
    elif isinstance(command, d.Hold):
        await delivery.hold(command)
    elif isinstance(command, d.Release):
        await delivery.release(command)
    elif isinstance(command, d.Withdraw | d.WithdrawMember | d.WithdrawTeam):
        await delivery.cancel(command)
    else:
        await delivery.consume(command)


@functools.cache
def harness_command() -> str:
    """The CLI as an agent's shell can run it whatever its PATH holds (an agent started as the README shows,
    `.venv/bin/harness agent start`, has no `harness` on it): the console script beside this Python, else
    this Python running the CLI module."""
    script = Path(sys.executable).parent / "harness"
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script))
    return shlex.join([sys.executable, "-m", "harness.cli.main"])


def command_prefix(home: Path, team_id: str, key_file: Path) -> str:
    """The exact shell prefix a member's introduction teaches. It names the member's private key file (0600,
    in the data directory), never the key: a command line is visible to every local user (`ps`), and it
    stays in a pane's scrollback and a shell's history."""
    home_arg, team, key_arg = (shlex.quote(str(value)) for value in (home, team_id, key_file))
    return f"{harness_command()} team --home {home_arg} --team {team} --key-file {key_arg}"


def remote_command_prefix(home: Path, owner_machine: str, team_id: str, key_file: Path) -> str:
    """The prefix for a member whose team a paired machine owns, rendered by the member's own machine: its
    daemon's gateway carries each call to the owner, and the key stays in a private file here, as for a
    member of a team owned here."""
    home_arg, machine, team, key_arg = (
        shlex.quote(str(value)) for value in (home, owner_machine, team_id, key_file)
    )
    where = f"--home {home_arg} --machine {machine} --team {team}"
    return f"{harness_command()} team {where} --key-file {key_arg}"
