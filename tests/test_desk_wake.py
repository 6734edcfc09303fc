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
from harness.io.daemon import Daemon
from harness.io.desk_runner import RunnerTiming
from harness.io.terminal_port import Screen, ScreenState
from tests import test_daemon
from tests.test_daemon import Api, running, team_with_keys
from tests.test_desk_runner import FakeTerminals, answer_delivery, is_, question_delivery, until

S = ScreenState
BUSY = tuple(f"busy{n:02d}" for n in range(24))
ROUNDS = 4
# No poll inside the measured rounds: the rounds take seconds, so every look in them is one a wake asked for.
NO_POLL = RunnerTiming(poll_ms=30 * 60_000, turn_watch_ms=60_000)
# Polls inside the rounds: each may look at every busy agent once, and nothing else may.
SHORT_POLL = RunnerTiming(poll_ms=200, turn_watch_ms=60_000)
LIMITS = attrs.evolve(DEFAULT_LIMITS, write_settle_ms=50)


class CountingTerminals(FakeTerminals):
    def __init__(self, screens: dict[str, ScreenState]) -> None:
        super().__init__(screens)
        self.looks: dict[str, int] = dict.fromkeys(screens, 0)

    async def observe(self, agent_id: str) -> Screen:
        self.looks[agent_id] += 1
        return await super().observe(agent_id)


@attrs.frozen
class Measured:
    """What the asks and replies of the measured rounds cost, in looks, and how long they took."""

    busy_looks: dict[str, int]  # looks at each agent waiting on a busy screen
    bob_looks: int  # looks at the agent the questions are for
    elapsed_ms: int  # on the daemon's clock, the desk's poll clock


async def ask_and_reply_rounds(tmp_path: Path, timing: RunnerTiming) -> Measured:
    """ROUNDS asks from alice to bob and their replies, with 24 more agents waiting on busy screens."""
    fake = CountingTerminals(
        {"agent-alice": S.IDLE, "agent-bob": S.IDLE} | {f"agent-{b}": S.BUSY for b in BUSY}
    )

    def factory(registry: AgentRegistry) -> FakeTerminals:
        return fake

    async with running(tmp_path, LIMITS, terminals=factory, runner_timing=timing) as daemon:
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
        before, started = dict(fake.looks), daemon.clock()
        for round_ in range(ROUNDS):
            question = f"q{round_}"
            await alice("ask", "t1", id=question, to="bob", text=f"Round {round_}?")
            await accepted(daemon, question, answer=False, timing=timing)
            await bob("reply", "t1", questionId=question, text="yes")
            await accepted(daemon, question, answer=True, timing=timing)
        elapsed = daemon.clock() - started
        looks = {b: fake.looks[f"agent-{b}"] - before[f"agent-{b}"] for b in BUSY}
        return Measured(looks, fake.looks["agent-bob"] - before["agent-bob"], elapsed)


async def accepted(daemon: Daemon, question: str, *, answer: bool, timing: RunnerTiming) -> None:
    """Wait for the question's (or its answer's) notice to be accepted; a desk that leaves new work to its
    next poll fails here, naming it."""
    view = answer_delivery if answer else question_delivery
    notice = "answer" if answer else "question"
    await test_daemon.until(
        lambda: is_(view(daemon, question), "accepted"),
        f"{question}'s {notice} accepted (a submit wakes the desk; polls are {timing.poll_ms} ms apart)",
    )


async def test_an_ask_and_its_reply_look_only_at_the_agents_they_concern(tmp_path: Path) -> None:
    measured = await ask_and_reply_rounds(tmp_path, NO_POLL)
    busy_looks = sum(measured.busy_looks.values())
    assert busy_looks == 0, (
        f"{ROUNDS} asks and replies looked {busy_looks} times at 24 agents they do not concern"
    )
    assert measured.bob_looks > 0  # the agents concerned were looked at


async def test_between_polls_no_wake_looks_again_at_an_agent_it_does_not_concern(tmp_path: Path) -> None:
    """With polls inside the rounds, each busy agent is looked at once a poll: as many polls as could fall in
    the rounds' time, and one more that began before them (a desk that looks at every waiting agent on each
    wake looks at them on every write done and every due write as well)."""
    measured = await ask_and_reply_rounds(tmp_path, SHORT_POLL)
    polls = measured.elapsed_ms // SHORT_POLL.poll_ms + 2
    most = max(measured.busy_looks.values())
    assert most <= polls, (
        f"{ROUNDS} asks and replies in {measured.elapsed_ms} ms looked up to {most} times at a busy agent"
        f" they do not concern; polls {SHORT_POLL.poll_ms} ms apart allow {polls}: a wake looked at it again"
    )
    assert measured.bob_looks > 0  # the agents concerned were looked at
