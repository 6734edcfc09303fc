# Issue 18, "daemon CPU per ask+reply with 2 vs 863 agents waiting (the desk re-checks every waiting agent on
# each wake)": the desk runner looks at every waiting agent once a poll, and a wake between polls (new work,
# a write done, a due write) looks only at the agents it concerns. Counted in looks at scripted terminals in a
# real loopback daemon: what an ask and its reply cost must not grow with the agents waiting on busy screens.
from __future__ import annotations

from pathlib import Path

import attrs
import trio

from harness.core.limits import DEFAULT_LIMITS
from harness.io.agents import AgentRegistry
from harness.io.desk_runner import RunnerTiming
from harness.io.terminal_port import Screen, ScreenState
from tests.test_daemon import Api, running, team_with_keys
from tests.test_desk_runner import FakeTerminals, answer_delivery, is_, question_delivery, until

S = ScreenState
BUSY = tuple(f"busy{n:02d}" for n in range(24))
# No poll inside the measured rounds: the rounds take seconds, so every look in them is one a wake asked for.
NO_POLL = RunnerTiming(poll_ms=30 * 60_000, turn_watch_ms=60_000)
LIMITS = attrs.evolve(DEFAULT_LIMITS, write_settle_ms=50)


class CountingTerminals(FakeTerminals):
    def __init__(self, screens: dict[str, ScreenState]) -> None:
        super().__init__(screens)
        self.looks: dict[str, int] = dict.fromkeys(screens, 0)

    async def observe(self, agent_id: str) -> Screen:
        self.looks[agent_id] += 1
        return await super().observe(agent_id)


async def test_an_ask_and_its_reply_look_only_at_the_agents_they_concern(tmp_path: Path) -> None:
    fake = CountingTerminals(
        {"agent-alice": S.IDLE, "agent-bob": S.IDLE} | {f"agent-{b}": S.BUSY for b in BUSY}
    )

    def factory(registry: AgentRegistry) -> FakeTerminals:
        return fake

    async with running(tmp_path, LIMITS, terminals=factory, runner_timing=NO_POLL) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner, people=("alice", "bob", *BUSY), machine=daemon.machine_id)
        team = daemon.durable.teams["t1"]
        await until(lambda: all(m.introduction is not None for m in team.members.values()))
        # Every busy agent was looked at (its introduction waits on a busy screen); alice's and bob's landed.
        await until(lambda: all(fake.looks[f"agent-{b}"] >= 1 for b in BUSY))
        for name in ("alice", "bob"):
            fake.turned.add(f"agent-{name}")
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        with trio.fail_after(60):
            while fake.written_to("agent-alice") == [] or fake.written_to("agent-bob") == []:
                await trio.sleep(0.01)
        before = dict(fake.looks)
        for round_ in range(4):
            question = f"q{round_}"
            await alice("ask", "t1", id=question, to="bob", text=f"Round {round_}?")
            await until(lambda q=question: is_(question_delivery(daemon, q), "accepted"))
            await bob("reply", "t1", questionId=question, text="yes")
            await until(lambda q=question: is_(answer_delivery(daemon, q), "accepted"))
        busy_looks = sum(fake.looks[f"agent-{b}"] - before[f"agent-{b}"] for b in BUSY)
        assert busy_looks == 0, (
            f"4 asks and replies looked {busy_looks} times at 24 agents they do not concern"
        )
        assert fake.looks["agent-bob"] > before["agent-bob"]  # the agents concerned were looked at
        assert all(is_(question_delivery(daemon, f"q{r}"), "accepted") for r in range(4))
