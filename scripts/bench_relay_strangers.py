# What 1,000 strangers holding connections on the relay cost two paired machines (issue 15), every part a
# real process on loopback (`harness relay serve`, two `harness daemon run`, paired with `harness pair`): the
# crowd of tests/test_relay_strangers.py (authenticated strangers held, each having sent one frame a daemon
# answers; connections that never finish the hello, opened again as the relay drops them). Printed: how long
# the crowd took to gather, the exchange (ask on A, reply from B through `--machine`, answer on A) with and
# without it as a ratio, the resident and peak memory of the relay and both daemons, what the crowd saw and
# the relay's counters. No figure is asserted: tests/test_relay_strangers.py holds the bounds.
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench_relay_fuzz import alive, exchanges, set_up

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' processes and crowd

from harness.io.listeners import raise_open_files_limit
from tests.test_relay_processes import World
from tests.test_relay_strangers import AUTHENTICATED, SILENT, Crowd, eventually, status_kb


def memory(world: World) -> str:
    parts = []
    for name, process in (("relay", world.relay), ("daemon A", world.a.daemon), ("daemon B", world.b.daemon)):
        rss, peak = (status_kb(process.pid, field) / 1024 for field in ("VmRSS", "VmHWM"))
        parts.append(f"{name} {rss:6.1f} MB (peak {peak:6.1f})")
    return "RSS: " + ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 100 + 20 strangers, 2 exchanges")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each line as it is measured
    authenticated, silent, rounds = (100, 20, 2) if args.quick else (AUTHENTICATED, SILENT, 5)
    raise_open_files_limit()
    with tempfile.TemporaryDirectory() as tmp:
        world = set_up(Path(tmp))
        try:
            quiet = exchanges(world, "quiet", rounds)
            print(f"exchange, quiet relay: median {quiet * 1000:7.1f} ms of {rounds} (the ratio's baseline)")
            print(memory(world))

            start = time.perf_counter()
            strangers = Crowd(world.url, [world.a.address, world.b.address], authenticated, silent)
            strangers.wait()
            gathered = time.perf_counter() - start
            print(
                f"crowd: {strangers.held} authenticated held (frames answered by a daemon: "
                f"{strangers.answered}, refused: {len(strangers.refused)}), "
                f"{strangers.silent_open} without a hello; gathered in {gathered:.1f} s"
            )
            crowded = exchanges(world, "crowded", rounds)
            ratio = crowded / quiet
            print(f"exchange, crowded relay: median {crowded * 1000:7.1f} ms of {rounds}, ratio {ratio:5.2f}")
            print(memory(world))
            alive(world)
            eventually(lambda: strangers.dropped >= silent, "the relay to drop every silent connection once")
            print(
                f"held now: {strangers.held} authenticated (lost {len(strangers.lost)}), "
                f"silent ones dropped by the relay: {strangers.dropped}, "
                f"longest-lived: {strangers.longest:.1f} s, overdue: {strangers.overdue}"
            )
            strangers.release()
            alive(world)
            assert world.relay.stop() == 0  # it prints its counters as it leaves
            print("relay counters:", world.relay.text().splitlines()[-1])
        finally:
            world.close()


if __name__ == "__main__":
    main()
