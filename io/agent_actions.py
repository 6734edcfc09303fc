# The owner's `agent_*` RPC actions over this machine's agent registry (io/agents.py), with what the desk
# last saw of an agent's terminal. Apart from the team actions: they change no ledger. Registering an agent
# (`agent attach`/`start`) hands its desk a fresh introduction of each team it is an active member of.
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from harness.core.delivery import UNSENT
from harness.core.limits import Limits
from harness.core.records import NoticeKind
from harness.core.team import reintroductions
from harness.io.agents import AgentError, AgentRegistry, entry_view
from harness.io.delivery_router import DeliveryRouter
from harness.io.desk_runner import DeskRunner
from harness.io.ledger_runner import LedgerRunner
from harness.io.rpc import Request
from harness.io.team_access import ActionError, Handler


@contextlib.contextmanager
def _agent_errors() -> Iterator[None]:
    try:
        yield
    except AgentError as error:
        raise ActionError(error.code.value, error.detail, bound=error.bound) from None


class AgentActions:
    """agent_register, agent_list, agent_show and agent_remove (owner only)."""

    def __init__(
        self,
        agents: AgentRegistry,
        machine_id: str,
        limits: Limits,
        clock: Callable[[], int],
        desk: DeskRunner,
        *,
        ledger: LedgerRunner | None = None,  # the teams owned here, and the way their notices reach a desk
        router: DeliveryRouter | None = None,
    ) -> None:
        self.agents = agents
        self.machine_id = machine_id
        self.limits = limits
        self.clock = clock
        self.desk = desk
        self.ledger = ledger
        self.router = router

    def handlers(self) -> dict[str, Handler]:
        return {
            "agent_register": self.register,
            "agent_list": self.list_agents,
            "agent_show": self.show,
            "agent_remove": self.remove,
        }

    async def register(self, request: Request) -> object:
        limits = self.limits
        with _agent_errors():
            entry = await self.agents.register(
                request.fields, self.clock(), limits.id_chars, limits.name_chars
            )
        self._reintroduce(entry.agent_id)
        return entry_view(entry)

    def _reintroduce(self, agent_id: str) -> None:
        """Team.v1: introductions expire after 24 h, so an agent that attaches later would never learn its
        command prefix: each active membership it holds in a team owned here gets a fresh introduction,
        unless one still waits unsent on the desk (it goes in now that the agent is here)."""
        if self.ledger is None or self.router is None:
            return
        ledger, at = self.ledger.durable, self.clock()
        waiting = {
            (notice.team_id, notice.membership_id)
            for notice in self.desk.desk.notices.values()
            if notice.kind is NoticeKind.INTRODUCTION
            and notice.agent_id == agent_id
            and notice.state in UNSENT
        }
        for team in ledger.teams.values():
            if team.id in self.ledger.unavailable:  # stopped (damaged or unwritable): it speaks for nobody
                continue
            for notice in reintroductions(team, self.machine_id, agent_id, at, self.limits):
                if (notice.team_id, notice.membership_id) not in waiting:
                    self.router.route(ledger, notice, at)

    async def list_agents(self, request: Request) -> object:
        with _agent_errors():
            entries = self.agents.entries()
        return {"machineId": self.machine_id, "agents": [entry_view(entry) for entry in entries]}

    async def show(self, request: Request) -> object:
        """One registered agent and what the desk last saw of it. Asked with a team (the web page always
        asks with its own), only an agent holding a membership of that team here is shown."""
        with _agent_errors():
            entry = self.agents.show(request.text("agentId"))
        if request.team_id is not None and not self._in_team(request.team_id, entry.agent_id):
            raise ActionError("not_found", f"no agent {entry.agent_id!r} in team {request.team_id!r} here")
        session = self.desk.desk.sessions.get(entry.agent_id)
        delivery = None
        if session is not None:  # what the desk last saw of its terminal and what waits for it
            delivery = {
                "observed": None if session.observed is None else session.observed.value,
                "observedAt": session.observed_at,
                "queued": len(session.queue),
                "held": len(session.held),
                "writing": session.writing,
            }
        return {**entry_view(entry), "machineId": self.machine_id, "delivery": delivery}

    def _in_team(self, team_id: str, agent_id: str) -> bool:
        team = None if self.ledger is None else self.ledger.durable.teams.get(team_id)
        return team is not None and any(
            m.machine_id == self.machine_id and m.agent_id == agent_id for m in team.members.values()
        )

    async def remove(self, request: Request) -> object:
        with _agent_errors():
            entry = await self.agents.remove(request.text("agentId"))
        return entry_view(entry)
