# What one delivery report costs a watcher of a full team (issue 18): the bytes pushed and the daemon's CPU to
# build them, as a whole snapshot (`subscribe`) against a delta (`subscribe` with `deltas: true`,
# core/team_delta.py), in the same run. The team is built with the core reducer at the exchanges bound, every
# exchange asked and answered with texts of --chars characters; the report is one notice's `delivered`.
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from harness.core import commands as c
from harness.core.codec import team_view
from harness.core.limits import DEFAULT_LIMITS
from harness.core.outcome import Accepted
from harness.core.records import EMPTY_LEDGER, Ledger, Team
from harness.core.team import step
from harness.core.team_delta import team_delta

TEAM = "bench"
LIMITS = DEFAULT_LIMITS
MINUTE = 60_000


def _ok(ledger: Ledger, command: object) -> Ledger:
    outcome = step(ledger, command, LIMITS)  # type: ignore[arg-type]
    assert isinstance(outcome, Accepted), outcome
    return outcome.state


def full_team(chars: int) -> Ledger:
    members = tuple(c.NewMember(f"m{n}", "machine", f"a{n}", f"agent-{n}", "role", f"key{n}") for n in (1, 2))
    ledger = _ok(EMPTY_LEDGER, c.CreateTeam(0, TEAM, "Bench", members))
    now = 0
    for n in range(LIMITS.exchanges):
        if n % LIMITS.asks_per_minute == 0:
            now += MINUTE  # keep under the rate window
        now += 1
        ledger = _ok(ledger, c.Ask(now, TEAM, f"q{n}", "m2", "q" * chars, member_key="key1"))
        ledger = _ok(ledger, c.Reply(now, TEAM, f"q{n}", "a" * chars, member_key="key2"))
    return ledger


def cpu_ms(work: Callable[[], object], rounds: int) -> float:
    started = time.process_time()
    for _ in range(rounds):
        work()
    return 1000 * (time.process_time() - started) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chars", type=int, default=300, help="characters of each question and answer")
    parser.add_argument("--rounds", type=int, default=20, help="repetitions of each CPU measurement")
    options = parser.parse_args()
    before = full_team(options.chars)
    last = f"{TEAM}/q{LIMITS.exchanges - 1}/question"
    after = _ok(before, c.RecordDelivery(10**9, TEAM, last, "delivered"))
    old: Team = before.teams[TEAM]
    new: Team = after.teams[TEAM]
    snapshot = json.dumps(team_view(new), separators=(",", ":"))
    delta = json.dumps(team_delta(old, new), separators=(",", ":"))
    snapshot_ms = cpu_ms(lambda: json.dumps(team_view(new)), options.rounds)
    delta_ms = cpu_ms(lambda: json.dumps(team_delta(old, new)), options.rounds)
    exchanges = len(new.exchange_order)
    print(f"one delivery report on a team of {exchanges} exchanges ({options.chars}-char texts):")
    print(f"  bytes pushed, whole snapshot      {len(snapshot):>10,}")
    print(f"  bytes pushed, delta               {len(delta):>10,}   ratio {len(delta) / len(snapshot):.4f}")
    print(f"  CPU ms to build, whole snapshot   {snapshot_ms:>10.2f}")
    print(f"  CPU ms to build, delta            {delta_ms:>10.2f}   ratio {delta_ms / snapshot_ms:.4f}")


if __name__ == "__main__":
    main()
