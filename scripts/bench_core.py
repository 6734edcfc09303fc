#!/usr/bin/env python3
# Benchmark of the pure team reducer on a team at its bounds (32 members, filled towards 500 exchanges):
# a realistic ask / delivery report / reply / tick mix. Prints commands per second and the ratio to a
# trivial dict-update loop measured in the same run (the machine is shared and noisy: ratios, not seconds),
# plus the cost of fingerprinting a state, which the model checker pays for every state it visits.
from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from harness.core import commands as c
from harness.core.errors import Rejected
from harness.core.records import EMPTY_LEDGER, Ledger
from harness.core.team import step

TEAM = "bench"
MEMBERS = 32
ASK_GAP_MS = 2_500  # keeps the team under 30 asks per rolling minute


def build_base(prefill: int) -> tuple[Ledger, int]:
    members = tuple(
        c.NewMember(f"m{n}", "machine", f"a{n}", f"agent-{n}", "role", f"key{n}") for n in range(MEMBERS)
    )
    ledger = _apply(EMPTY_LEDGER, c.CreateTeam(0, TEAM, "bench team", members))
    now = 0
    for n in range(prefill):
        now += ASK_GAP_MS
        ledger = _apply(
            ledger,
            c.Ask(
                now,
                TEAM,
                f"pre{n}",
                f"m{(n + 1) % MEMBERS}",
                "prefill question " * 8,
                member_key=f"key{n % MEMBERS}",
            ),
        )
        ledger = _apply(
            ledger,
            c.Reply(now + 1, TEAM, f"pre{n}", "prefill answer " * 8, member_key=f"key{(n + 1) % MEMBERS}"),
        )
    return ledger, now


def cycle_commands(start: int, questions: int) -> list[c.TeamCommand]:
    """One cycle of the mix: per question an ask, three delivery reports, a reply, two reports, a tick."""
    commands: list[c.TeamCommand] = []
    now = start
    for n in range(questions):
        now += ASK_GAP_MS
        asker, addressee = n % MEMBERS, (n * 7 + 3) % MEMBERS or 1
        if addressee == asker:
            addressee = (asker + 1) % MEMBERS
        qid = f"q{n}"
        commands += [
            c.Ask(
                now,
                TEAM,
                qid,
                f"m{addressee}",
                "Which endpoint returns daemon state? " * 4,
                context="I am implementing the phone's daemon list.",
                member_key=f"key{asker}",
            ),
            c.RecordDelivery(now + 1, TEAM, f"{TEAM}/{qid}/question", "queued", "busy"),
            c.RecordDelivery(now + 2, TEAM, f"{TEAM}/{qid}/question", "delivered"),
            c.RecordDelivery(now + 3, TEAM, f"{TEAM}/{qid}/question", "accepted"),
            c.Reply(
                now + 4,
                TEAM,
                qid,
                "GET /v1/daemon/state, see api.ts",
                ("src/api.ts:42",),
                member_key=f"key{addressee}",
            ),
            c.RecordDelivery(now + 5, TEAM, f"{TEAM}/{qid}/answer", "delivered"),
            c.RecordDelivery(now + 6, TEAM, f"{TEAM}/{qid}/answer", "accepted"),
            c.Tick(now + 7, TEAM),
        ]
    return commands


def _apply(ledger: Ledger, command: c.TeamCommand) -> Ledger:
    outcome = step(ledger, command)
    if isinstance(outcome, Rejected):
        raise SystemExit(f"benchmark command rejected: {outcome}")
    return outcome.state


def best_of(runs: int, body: Callable[[], float]) -> float:
    return min(body() for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument(
        "--questions", type=int, default=100, help="questions per cycle (base + these <= 500)"
    )
    args = parser.parse_args()

    base, now = build_base(500 - args.questions)
    mix = cycle_commands(now, args.questions)
    total = len(mix) * args.cycles

    def reducer() -> float:
        started = time.perf_counter()
        for _ in range(args.cycles):
            ledger = base
            for command in mix:
                outcome = step(ledger, command)
                assert not isinstance(outcome, Rejected), outcome
                ledger = outcome.state
        return time.perf_counter() - started

    def baseline() -> float:
        table: dict[str, int] = {}
        keys = [f"k{n % 500}" for n in range(len(mix))]
        started = time.perf_counter()
        for _ in range(args.cycles):
            for n, key in enumerate(keys):
                table[key] = n
        return time.perf_counter() - started

    reducer_s = best_of(3, reducer)
    baseline_s = best_of(3, baseline)

    states = []
    ledger = base
    for command in mix[:400]:
        outcome = step(ledger, command)
        assert not isinstance(outcome, Rejected)
        ledger = outcome.state
        states.append(ledger)
    started = time.perf_counter()
    for state in states:
        hash(state.teams[TEAM].exchanges)  # what a fresh state costs to fingerprint
        hash(state)
    fingerprint_us = (time.perf_counter() - started) / len(states) * 1e6

    rate = total / reducer_s
    print(f"team at bounds: {MEMBERS} members, {len(base.teams[TEAM].exchange_order)}..500 exchanges")
    print(f"reducer: {total} commands in {reducer_s:.3f} s = {rate:,.0f} commands/s (goal >= 50,000)")
    print(f"baseline dict-update loop: {total / baseline_s:,.0f} updates/s")
    print(f"ratio reducer/baseline time per op: {reducer_s / baseline_s:.1f}x")
    print(f"fingerprint of a fresh state: {fingerprint_us:.1f} us")


if __name__ == "__main__":
    main()
