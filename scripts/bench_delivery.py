"""Benchmark the delivery desk reducer with a delivery-heavy mix.

32 agents on one desk, every queue kept full (32 notices each): submits, busy and idle observations, write
started / finished, matching turns, inbox reads and clock ticks. The command stream is generated once by
driving the reducer, then replayed from the same start and timed. The figure is compared with a trivial
dict-update loop measured in the same run, so the ratio travels between machines. Goal: >= 50,000 commands/s.

    .venv/bin/python scripts/bench_delivery.py [--cycles N]
"""

from __future__ import annotations

import argparse
import time

from harness.core import delivery as d
from harness.core.errors import Rejected
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import NoticeKind

AGENTS = [f"agent{n:02d}" for n in range(32)]
MACHINE = "bench"


def generate(cycles: int) -> tuple[d.Desk, list[d.DeskCommand]]:
    """A valid command stream: every command is accepted when replayed in order from the returned desk."""
    limits = DEFAULT_LIMITS
    start = d.empty_desk(MACHINE)
    desk = start
    commands: list[d.DeskCommand] = []
    now = 1_000
    serial = 0

    def run(command: d.DeskCommand) -> None:
        nonlocal desk
        outcome = d.step(desk, command, limits)
        if isinstance(outcome, Rejected):
            raise SystemExit(f"bench stream refused {command!r}: {outcome}")
        desk = outcome.state
        commands.append(command)

    def submit(agent: str) -> None:
        nonlocal serial
        serial += 1
        run(
            d.Submit(
                now,
                "team",
                f"team/q{serial}/question",
                NoticeKind.QUESTION,
                f"q{serial}",
                f"mem-{agent}",
                MACHINE,
                agent,
                now + 86_400_000,
                f"[team] Question q{serial} from someone: what is {serial}?",
            )
        )

    for agent in AGENTS:
        for _ in range(limits.queued_per_agent):
            submit(agent)
    for cycle in range(cycles):
        for agent in AGENTS:
            now += limits.write_settle_ms
            run(d.Observe(now, agent, d.Observed.BUSY))
            now += 1
            run(d.Observe(now, agent, d.Observed.IDLE))
            head = desk.sessions[agent].queue[0]
            now += 1
            run(d.WriteStarted(now, head, d.Observed.IDLE, now - 1))
            now += 1
            run(d.WriteFinished(now, head, d.WriteResult.OK))
            now += 1
            run(d.TurnObserved(now, head))
            now += 1
            run(d.InboxRead(now, (head,)))
            submit(agent)
        now += 1
        run(d.Tick(now))
        if cycle % 50 == 0:
            run(d.Observe(now, AGENTS[cycle % len(AGENTS)], d.Observed.DRAFT))
    return start, commands


def replay(start: d.Desk, commands: list[d.DeskCommand]) -> tuple[float, d.Desk]:
    step, limits = d.step, DEFAULT_LIMITS
    desk = start
    begin = time.perf_counter()
    for command in commands:
        outcome = step(desk, command, limits)
        desk = outcome.state  # type: ignore[union-attr]  # the stream is known to be accepted
    return time.perf_counter() - begin, desk


def baseline(n: int) -> float:
    """A trivial reducer: copy-free dict update per command, the floor any Python reducer stands on."""
    state: dict[str, int] = {}
    keys = [f"agent{i % 32:02d}" for i in range(n)]
    begin = time.perf_counter()
    for key in keys:
        state[key] = state.get(key, 0) + 1
    return time.perf_counter() - begin


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=250, help="rounds over the 32 agents (default 250)")
    args = parser.parse_args()
    start, commands = generate(args.cycles)
    best = min(replay(start, commands)[0] for _ in range(3))
    _elapsed, final = replay(start, commands)
    base = min(baseline(len(commands)) for _ in range(3))
    rate = len(commands) / best
    base_rate = len(commands) / base
    kinds: dict[str, int] = {}
    for command in commands:
        kinds[type(command).__name__] = kinds.get(type(command).__name__, 0) + 1
    print(f"commands: {len(commands)}  ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
    unsent = sum(d.unsent_count(s) for s in final.sessions.values())
    print(f"records at the end: {len(final.notices)}; unsent: {unsent}")
    print(f"desk reducer:  {rate:,.0f} commands/s  ({best * 1e6 / len(commands):.1f} us/command)")
    print(f"dict baseline: {base_rate:,.0f} updates/s")
    print(
        f"ratio: the reducer runs at 1/{base_rate / rate:,.0f} of the baseline; goal >= 50,000 commands/s: "
        f"{'met' if rate >= 50_000 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
