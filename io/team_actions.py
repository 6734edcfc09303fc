# The `team` RPC actions that change a team or show it to its owner: create, membership, keys, lifecycle and
# the questions themselves. Each parses its request, sends one command to the ledger and answers with the
# durable outcome; ids are drawn here, where randomness may enter.
from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from harness.core.actions import TEAM_ACTIONS, Answer, Refers, TeamAction
from harness.core.codec import exchange_view, member_view, team_summary, team_view
from harness.core.commands import COMMAND_NAMES, AddMember, CreateTeam, NewMember, TeamCommand
from harness.core.errors import ErrorCode
from harness.core.records import Exchange, Membership, Team
from harness.core.remote_grant import observable
from harness.core.team import resolve_member
from harness.io import home as homes
from harness.io.delivery_router import DeliveryRouter
from harness.io.rpc import BAD_REQUEST, Request
from harness.io.team_access import ActionError, Handler, TeamAccess, observer, team_id

ID_BYTES = 16
KEY_BYTES = 24

E = ErrorCode

# The ledger command of each name, which a command action of that name builds.
COMMAND_CLASSES: dict[str, Callable[..., TeamCommand]] = {name: cls for cls, name in COMMAND_NAMES.items()}
# The record a command action's answer shows, and its view.
VIEWS: dict[Answer, tuple[type, Callable[[Any], object]]] = {
    Answer.TEAM: (Team, team_view),
    Answer.EXCHANGE: (Exchange, exchange_view),
    Answer.MEMBER: (Membership, member_view),
}


def draw_id() -> str:
    return secrets.token_hex(ID_BYTES)


def _new_member(data: dict[str, Any], operation_id: str | None, default_id: str) -> NewMember:
    allowed = {"id", "machineId", "agentId", "name", "role"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        detail = f"a member has no field {', '.join(map(repr, unknown))}"
        raise ActionError(BAD_REQUEST, detail, operation_id)
    values: dict[str, str] = {}
    for name in ("machineId", "agentId", "name"):
        value = data.get(name)
        if not isinstance(value, str):
            raise ActionError(BAD_REQUEST, f"a member needs a string '{name}'", operation_id)
        values[name] = value
    member_id, role = data.get("id"), data.get("role", "")
    if not isinstance(member_id, str | None) or not isinstance(role, str):
        raise ActionError(BAD_REQUEST, "a member's 'id' and 'role' are strings", operation_id)
    return NewMember(
        member_id or default_id,
        values["machineId"],
        values["agentId"],
        values["name"],
        role,
        secrets.token_hex(KEY_BYTES),
    )


def build_command(
    action: TeamAction, request: Request, member_ref: Callable[[str | None], str | None]
) -> tuple[TeamCommand, str | None]:
    """The ledger command of a command action, and its operation id: each field present fills its attribute
    (an absent optional one leaves the command's default), an absent operation id is drawn, and `member_ref`
    turns a member's name into its membership id. Raises FrameError for a field of the wrong kind."""
    values: dict[str, Any] = {}
    operation_id = None
    for declared in action.fields:
        value = request.read(declared)
        if declared.refers is Refers.OPERATION:
            value = operation_id = value or draw_id()
        elif declared.refers is Refers.MEMBER:
            value = member_ref(value)
        if value is not None:
            values[declared.attribute] = value
    command = COMMAND_CLASSES[action.name](0, team_id(request), member_key=request.member_key, **values)
    return command, operation_id


class TeamActions:
    """list, create, get, members, add and key by hand; remove, pause, resume, archive, ask, reply, cancel and
    expire from their rows in the action table."""

    def __init__(
        self,
        access: TeamAccess,
        router: DeliveryRouter,
        home: Path,
        roster_changed: Callable[[Team], Awaitable[None]],
    ) -> None:
        self.access = access
        self.router = router
        self.home = home
        self._roster_changed = roster_changed  # the board's members follow the team's

    def handlers(self) -> dict[str, Handler]:
        """The hand-written handlers, and one built from its row for each command action with an answer."""
        built = {
            name: partial(self._command, action)
            for name, action in TEAM_ACTIONS.items()
            if action.command and action.answer is not None
        }
        written: dict[str, Handler] = {
            "list": self.list_teams,
            "create": self.create,
            "get": self.get,
            "members": self.members,
            "add": self.add,
            "key": self.key,
        }
        assert not written.keys() & built.keys(), "an action is built from its row or written, not both"
        return {**written, **built}

    async def _command(self, action: TeamAction, request: Request) -> object:
        """A command action as its row declares it; the answer is the view of the record the ledger
        returned."""
        command, operation_id = build_command(action, request, partial(self._member_ref, request))
        record = await self.access.run(command, operation_id)
        assert action.answer is not None
        kind, view = VIEWS[action.answer]
        assert isinstance(record, kind)
        if action.answer is Answer.MEMBER:
            await self._follow(request)
        return view(record)

    def _member_ref(self, request: Request, ref: str | None) -> str | None:
        """A membership id for `ref`, which people may give as an active member's name."""
        team = self.access.ledger.durable.teams.get(team_id(request))
        member = None if team is None or ref is None else resolve_member(team, ref)
        return member.id if member is not None else ref

    async def list_teams(self, request: Request) -> object:
        ledger = self.access.ledger
        teams = sorted(ledger.durable.teams.values(), key=lambda team: (team.created_at, team.id))
        seer = observer(request)
        if seer is not None:  # a paired machine's owner: the teams it has a member in, nothing else
            teams = [team for team in teams if observable(team, seer)]
        unavailable = {} if seer is not None else ledger.unavailable
        return {
            "teams": [team_summary(team) for team in teams],
            "unavailable": [
                {"id": stopped, "error": E.CORRUPT_STATE.value, "detail": why}
                for stopped, why in sorted(unavailable.items())
            ],
        }

    async def create(self, request: Request) -> object:
        new_id = request.opt_text("id") or draw_id()
        # A member without an id gets one derived from the team id, so retrying an uncertain create with the
        # same team id and file is recognised as the same create.
        members = tuple(
            _new_member(data, new_id, hashlib.sha256(f"{new_id}/{index}".encode()).hexdigest()[:16])
            for index, data in enumerate(request.object_list("members"))
        )
        if new_id in self.access.ledger.unavailable:
            raise ActionError(E.CORRUPT_STATE.value, self.access.ledger.unavailable[new_id], new_id)
        self._refuse_deleted_id(new_id)
        team = await self.access.run(CreateTeam(0, new_id, request.text("name"), members), new_id)
        assert isinstance(team, Team)
        await self._roster_changed(team)
        return team_view(team)

    def _refuse_deleted_id(self, new_id: str) -> None:
        """A team deleted here (`team delete`) leaves its notice receipts on the desk, and its notice ids are
        derived from the team id: a new team under that id would find its introductions taken as known."""
        try:
            deleted = new_id in homes.deleted_teams(self.home)
        except homes.HomeError as error:
            raise ActionError(E.CORRUPT_STATE.value, str(error), new_id) from None
        if deleted:
            detail = f"team id {new_id!r} belonged to a team deleted here; choose another id"
            raise ActionError(E.CONFLICT.value, detail, new_id)

    async def get(self, request: Request) -> object:
        return team_view(self.access.team(request))

    async def members(self, request: Request) -> object:
        team = self.access.team(request)
        self.access.viewer(team, request)
        return {
            "teamId": team.id,
            "revision": team.revision,
            "members": [member_view(team.members[member_id]) for member_id in team.member_order],
        }

    async def add(self, request: Request) -> object:
        member = _new_member(dict(request.fields), None, draw_id())
        result = await self.access.run(AddMember(0, team_id(request), member), member.id)
        assert isinstance(result, Membership)
        await self._follow(request)
        return member_view(result)

    async def _follow(self, request: Request) -> None:
        team = self.access.ledger.durable.teams.get(team_id(request))
        if team is not None:
            await self._roster_changed(team)

    async def key(self, request: Request) -> object:
        team = self.access.team(request)
        member_id = request.text("memberId")
        member = resolve_member(team, member_id)
        key = None if member is None else next((k for k, m in team.keys.items() if m == member.id), None)
        if member is None or key is None:
            raise ActionError(E.NOT_FOUND.value, f"no active member {member_id!r} in team {team.id!r}")
        command = self.router.command_prefix(self.access.ledger.durable, team.id, key)
        local = member.machine_id == self.router.machine_id
        key_file = str(homes.member_key_path(self.home, team.id, member.id)) if local else None
        return {
            "teamId": team.id,
            "memberId": member.id,
            "name": member.name,
            "memberKey": key,
            "keyFile": key_file,
            "command": command,
        }
