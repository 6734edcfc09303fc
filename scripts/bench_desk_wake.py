# Issue 18, "daemon CPU per ask+reply with 2 vs 863 agents waiting (the desk re-checks every waiting agent on
# each wake)": what one ask and its reply cost the daemon with no agent waiting and with W agents waiting on
# busy screens, in one process (a real loopback daemon at the production poll, scripted terminals). Counts
# first (looks at terminals per round), then process CPU per round. Goal: W/0 about 1.0 for the looks at
# alice and bob and for the CPU net of the polls (the polls' own cost grows with W by design).
# Times are compared only within one run, as ratios: the machine's load moves them from run to run.
#   .venv/bin/python scripts/bench_desk_wake.py [--waiting 200] [--rounds 20]
from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from harness.core.limits import DEFAULT_LIMITS
from harness.io import home as homes
from harness.io.agents import AgentRegistry
from harness.io.client import Client
from harness.io.daemon import Daemon, now_ms
from harness.io.desk_runner import RunnerTiming
from harness.io.terminal_port import Licence, Screen, ScreenState, WriteOutcome

PAIR = ("alice", "bob")  # the asker and the one asked, on idle screens; every other member waits, busy
WARMUP = 2  # rounds before counting: first-use costs are not an ask's
# The production write settle (2 s) would make each round last seconds, and the polls in it (a cost per
# second, the same before and after the change) most of what a round measures; the tests' 50 ms keeps a round
# to the wakes it sets off. Asks are not rate-limited here: the rounds come as fast as they are answered.
LIMITS = attrs.evolve(DEFAULT_LIMITS, write_settle_ms=50, asks_per_minute=100_000)
# A poll looks at every waiting agent once, a cost per second rather than per ask: "sweeps of the waiting
# agents" (their looks / W) should match "polls due in a round", and "CPU ms net of the polls" takes off the
# round's wall time at the CPU rate of a quiet window as long as the rounds.
RATIOS = {"looks", "looks at alice and bob", "CPU ms", "CPU ms net of the polls"}


class Terminals:
    """Scripted screens: a screen holds its state; a write looks once more and pastes only on an idle."""

    def __init__(self, screens: dict[str, ScreenState]) -> None:
        self.screens = screens
        self.turned: set[str] = set()  # agents whose screen shows a turn on what was written to them
        self.looks = self.busy_looks = 0

    def agents(self) -> Sequence[str]:
        return list(self.screens)

    async def observe(self, agent_id: str) -> Screen:
        state = self.screens[agent_id]
        self.looks += 1
        self.busy_looks += state is ScreenState.BUSY
        return Screen(state, now_ms(), (f"scripted {state}",), "")

    async def write(self, agent_id: str, text: str, licence: Licence | None = None) -> WriteOutcome:
        screen = await self.observe(agent_id)
        allowed = screen.state is ScreenState.IDLE and (licence is None or await licence(screen))
        return WriteOutcome.OK if allowed else WriteOutcome.FAILED

    async def turn_matches(self, agent_id: str, text: str) -> bool:
        return agent_id in self.turned


async def until(daemon: Daemon, done: Callable[[], bool]) -> None:
    """Woken by the team's durable changes, not by a timer: a polling wait's CPU would grow with a round's
    wall time and blur the comparison."""
    with trio.fail_after(120):
        while not done():
            with trio.move_on_after(1):
                await daemon.ledger.changed("t1").wait()


def state(daemon: Daemon, question: str, *, answer: bool = False) -> str | None:
    exchange = daemon.durable.teams["t1"].exchanges.get(question)
    view = None if exchange is None else exchange.answer_delivery if answer else exchange.delivery
    return None if view is None else view.state


def settled(daemon: Daemon) -> bool:
    """alice's and bob's introductions were taken; every other one waits on a busy screen."""
    for member in daemon.durable.teams["t1"].members.values():
        view, want = member.introduction, ("accepted",) if member.name in PAIR else ("queued", "busy")
        if view is None or (view.state, view.reason)[: len(want)] != want:
            return False
    return True


async def measure(home: Path, waiting: int, rounds: int) -> dict[str, float]:
    """Looks and process CPU per ask+reply round with `waiting` agents waiting on busy screens, and the CPU
    rate of a quiet window as long as the rounds (the polls alone)."""
    names = (*PAIR, *(f"w{n:04d}" for n in range(waiting)))
    fake = Terminals({f"agent-{n}": ScreenState.IDLE if n in PAIR else ScreenState.BUSY for n in names})
    fake.turned |= {f"agent-{n}" for n in PAIR}  # each shows a turn on what is written to it
    exchanges = max(WARMUP + rounds, LIMITS.exchanges)  # every round's exchange is kept
    limits = attrs.evolve(LIMITS, memberships=len(names), exchanges=exchanges)

    def terminals(registry: AgentRegistry) -> Terminals:
        return fake

    def now() -> tuple[float, float, float, float]:  # CPU ms, wall ms, looks, looks at the waiting agents
        return time.process_time() * 1000, time.perf_counter() * 1000, fake.looks, fake.busy_looks

    daemon = Daemon(home, limits=limits, terminals=terminals, log=lambda line: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        owner_token = homes.read_owner_token(daemon.home)
        clients: dict[str | None, Client] = {}  # one connection per caller (None: the owner)

        async def request(action: str, key: str | None = None, **fields: Any) -> Any:
            if key not in clients:
                clients[key] = Client(daemon.socket_path)
                await trio.to_thread.run_sync(clients[key].connect)
            team, token = None if action == "create" else "t1", None if key else owner_token
            call = partial(clients[key].request, action, team_id=team, member_key=key, owner_token=token)
            return await trio.to_thread.run_sync(lambda: call(fields=fields))

        members = [{"machineId": daemon.machine_id, "agentId": f"agent-{n}", "name": n} for n in names]
        await request("create", id="t1", name="bench", members=members)
        alice, bob = [(await request("key", memberId=n))["memberKey"] for n in PAIR]
        await until(daemon, lambda: settled(daemon))

        async def round_(question: str) -> None:  # alice asks, bob's turn shows; bob replies, alice's does
            await request("ask", alice, id=question, to="bob", text=f"{question}?")
            await until(daemon, lambda: state(daemon, question) == "accepted")
            await request("reply", bob, questionId=question, text="yes")
            await until(daemon, lambda: state(daemon, question, answer=True) == "accepted")

        for n in range(WARMUP):
            await round_(f"warmup{n}")
        began = now()
        for n in range(rounds):
            await round_(f"q{n}")
        ended = now()
        await trio.sleep((ended[1] - began[1]) / 1000)
        quiet = now()
        for client in clients.values():
            client.close()
        daemon.stop()
    per_round = [(b - a) / rounds for a, b in zip(began, ended, strict=True)]
    quiet_rate = (quiet[0] - ended[0]) / (quiet[1] - ended[1])  # CPU ms per wall ms
    return {
        "looks": per_round[2],
        "looks at alice and bob": per_round[2] - per_round[3],
        "sweeps of the waiting agents": per_round[3] / max(1, waiting),  # a look at each, once a sweep
        "polls due in a round": per_round[1] / RunnerTiming().poll_ms,
        "CPU ms": per_round[0],
        "CPU ms net of the polls": per_round[0] - quiet_rate * per_round[1],
        "wall ms": per_round[1],
        "quiet CPU ms/s": quiet_rate * 1000,
    }


def count(text: str) -> int:
    """A positive whole number, or argparse's one-line usage error."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the desk's wake cost with agents waiting on busy screens")
    parser.add_argument("--waiting", type=count, default=200, help="agents waiting on busy screens (W)")
    parser.add_argument("--rounds", type=count, default=20, help="ask+reply rounds measured (R)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [trio.run(measure, Path(tmp) / str(w), w, args.rounds) for w in (0, args.waiting)]
    print(f"desk cost per ask+reply round ({args.rounds} rounds, production poll, W={args.waiting})")
    print(f"  {'':34s} {'N=0':>9s} {f'N={args.waiting}':>9s} {'W/0':>6s}")
    for name in runs[0]:
        zero, many = runs[0][name], runs[1][name]
        ratio = f"{many / zero:6.2f}" if name in RATIOS and zero else ""
        print(f"  {name:34s} {zero:9.2f} {many:9.2f} {ratio}")


if __name__ == "__main__":
    main()
