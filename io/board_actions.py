# The `team` RPC actions of a team's board (spec/board-v1.md, section 9): `board_get` shows it, `board` runs
# one board command. The daemon, not the caller, sets what a command's authority rests on: the operation's
# session (the board's, or the generation the caller names, which `step` refuses when stale), the actor (the
# membership the member key resolves to; None for the owner) and the time. People name members by name; the
# board knows membership ids, so names are resolved here.
from __future__ import annotations

import secrets
from typing import Any

import attrs

from harness.core.board import BOARD_COMMAND_NAMES, BoardCommand, Session, caller_op_problem
from harness.core.codec import board_command_from_json, board_result_view, board_view
from harness.core.errors import ErrorCode, Rejected
from harness.core.records import Team, TeamState
from harness.core.team import resolve_member
from harness.io.board_runner import BoardRunner
from harness.io.rpc import BAD_REQUEST, Request
from harness.io.team_access import ActionError, Handler, TeamAccess, rejected_error

E = ErrorCode
ID_BYTES = 16
# Set by the daemon on every command: a caller that sends one is refused, never believed.
DAEMON_FIELDS = frozenset({"op", "session", "actor", "at"})
# Commands the daemon sends itself: the board's members follow the team's (add and remove change them).
SHELL_COMMANDS = frozenset({"set_members"})
# Only reading notes stays open on an archived team's board; the record is kept, nothing else changes.
ARCHIVED_OPEN = frozenset({"read_messages"})


class BoardActions:
    """board_get and board, over the boards of one BoardRunner."""

    def __init__(self, access: TeamAccess, boards: BoardRunner) -> None:
        self.access = access
        self.boards = boards

    def handlers(self) -> dict[str, Handler]:
        return {"board_get": self.get, "board": self.command}

    async def follow(self, team: Team) -> None:
        """After a create, add or remove: the board's members follow the team's (a stopped board is said
        on its next request)."""
        await self.boards.run(team, None)

    async def get(self, request: Request) -> object:
        team = self.access.team(request)
        viewer = self.access.viewer(team, request)
        outcome = await self.boards.run(team, None)
        if isinstance(outcome, Rejected):
            raise rejected_error(outcome)
        return {**board_view(outcome.state), "you": None if viewer is None else viewer.id}

    async def command(self, request: Request) -> object:
        team = self.access.team(request)
        viewer = self.access.viewer(team, request)
        op = request.opt_text("id") or secrets.token_hex(ID_BYTES)
        refused = caller_op_problem(op, self.boards.limits)
        if refused is not None:
            raise rejected_error(refused, op[:64])
        data = request.fields.get("command")
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            raise ActionError(BAD_REQUEST, "'command' must be an object with a string 'type'", op)
        kind = data["type"]
        if kind not in BOARD_COMMAND_NAMES.values() or kind in SHELL_COMMANDS:
            known = sorted(set(BOARD_COMMAND_NAMES.values()) - SHELL_COMMANDS)
            raise ActionError(BAD_REQUEST, f"no board command {kind!r}; known: {', '.join(known)}", op)
        given = sorted(DAEMON_FIELDS & set(data))
        if given:
            detail = f"a board command carries no {', '.join(given)}: the daemon sets them"
            raise ActionError(BAD_REQUEST, detail, op)
        if team.state is TeamState.ARCHIVED and kind not in ARCHIVED_OPEN:
            raise ActionError(E.TEAM_ARCHIVED.value, f"team {team.id!r} is archived; its board is kept", op)
        generation = request.opt_int("generation")
        placeholder = {"teamId": team.id, "generation": 0}
        actor = None if viewer is None else viewer.id
        parsed = board_command_from_json(
            {**_resolved(team, data), "op": op, "session": placeholder, "actor": actor, "at": 0}
        )
        if isinstance(parsed, Rejected):
            raise ActionError(BAD_REQUEST, f"{kind}: {parsed.detail}", op)

        def build(session: Session, at: int) -> BoardCommand:
            named = session if generation is None else Session(session.team_id, generation)
            return attrs.evolve(parsed, session=named, at=at)

        outcome = await self.boards.run(team, build)
        if isinstance(outcome, Rejected):
            raise rejected_error(outcome, op)
        return {
            "operationId": op,
            "revision": outcome.state.revision,
            "result": board_result_view(outcome.state, outcome.result),
        }


def _member_id(team: Team, ref: object) -> object:
    """A membership id for `ref`, which people may give as an active member's name."""
    member = resolve_member(team, ref) if isinstance(ref, str) else None
    return ref if member is None else member.id


def _resolved(team: Team, data: dict[str, Any]) -> dict[str, Any]:
    """`data` with member names in `member`, `claimant` and member addressees replaced by their ids."""
    resolved = dict(data)
    for name in ("member", "claimant"):
        if name in resolved:
            resolved[name] = _member_id(team, resolved[name])
    for name in ("to", "owner"):
        addressee = resolved.get(name)
        if isinstance(addressee, dict) and addressee.get("kind") == "member":
            resolved[name] = {**addressee, "name": _member_id(team, addressee.get("name"))}
    return resolved
