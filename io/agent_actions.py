# The owner's `agent_*` RPC actions over this machine's agent registry (io/agents.py), with what the desk
# last saw of an agent's terminal. Apart from the team actions: they touch no ledger.
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from harness.core.limits import Limits
from harness.io.agents import AgentError, AgentRegistry, entry_view
from harness.io.desk_runner import DeskRunner
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
    ) -> None:
        self.agents = agents
        self.machine_id = machine_id
        self.limits = limits
        self.clock = clock
        self.desk = desk

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
        return entry_view(entry)

    async def list_agents(self, request: Request) -> object:
        with _agent_errors():
            entries = self.agents.entries()
        return {"machineId": self.machine_id, "agents": [entry_view(entry) for entry in entries]}

    async def show(self, request: Request) -> object:
        with _agent_errors():
            entry = self.agents.show(request.text("agentId"))
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

    async def remove(self, request: Request) -> object:
        with _agent_errors():
            entry = await self.agents.remove(request.text("agentId"))
        return entry_view(entry)
