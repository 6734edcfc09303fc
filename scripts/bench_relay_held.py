# What strangers who authenticate and then trickle unfinished messages make a relay hold (remote-v1, "One
# budget for what connections hold"). A real `harness relay serve` process on loopback; this process opens
# the strangers, each sending all but the end of one text message of `--part` bytes, and reads the relay's
# resident memory (/proc VmRSS). Printed for a relay whose budget cannot bite (the relay before the budget:
# every unfinished message is held) and for two budgets, as a ratio to the idle relay's memory measured in
# the same run, with the relay's own count of the connections it closed for the budget. No figure is
# asserted: tests/test_relay_hostile.py holds the rule.
#
#     .venv/bin/python scripts/bench_relay_held.py [--strangers 150] [--part-mb 2]
from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import trio

from harness.io.relay import connect_relay
from harness.io.seal import Identity

HARNESS = [sys.executable, "-m", "harness.cli.main"]
NO_BUDGET = 1 << 40


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} for pid {pid}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def unfinished_text_frame(declared: int, sent: int) -> bytes:
    """The start of a masked WebSocket text frame of `declared` payload bytes, `sent` of them (zero mask)."""
    return bytes([0x81, 0x80 | 127]) + declared.to_bytes(8, "big") + bytes(4) + b"a" * sent


async def crowd(url: str, strangers: int, part: int, pid: int) -> tuple[int, int]:
    """Open the strangers, each trickling `part` bytes of a message; (peak VmRSS kB seen, still open)."""
    peak = 0
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(strangers):
            client = await stack.enter_async_context(connect_relay(url, Identity.generate()))
            await client.ws._stream.send_all(unfinished_text_frame(part + 1, part))
            clients.append(client)
            peak = max(peak, status_kb(pid, "VmRSS"))
        await trio.sleep(1.0)  # the relay reads what is in flight
        peak = max(peak, status_kb(pid, "VmRSS"))
        return peak, sum(1 for client in clients if client.ws.closed is None)


def measure(strangers: int, part: int, held_bytes: int) -> tuple[float, float, float, int, int]:
    port = free_port()
    argv = [*HARNESS, "relay", "serve", "--port", str(port), "--held-bytes", str(held_bytes)]
    relay = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        assert relay.stderr is not None
        line = relay.stderr.readline()
        if "listening" not in line:
            raise SystemExit(f"the relay did not start: {line}")
        idle = status_kb(relay.pid, "VmRSS")
        started = time.perf_counter()
        peak, still_open = trio.run(crowd, f"ws://127.0.0.1:{port}", strangers, part, relay.pid)
        elapsed = time.perf_counter() - started
    finally:
        relay.terminate()
        _, err = relay.communicate(timeout=30)
    stats = json.loads(err.strip().splitlines()[-1])["stats"]
    return idle / 1024, peak / 1024, elapsed, stats.get("held_evicted", 0), still_open


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strangers", type=int, default=150)
    parser.add_argument("--part-mb", type=float, default=2.0)
    args = parser.parse_args()
    part = int(args.part_mb * (1 << 20))
    print(f"{args.strangers} strangers, each trickling {part / (1 << 20):.1f} MB of one unfinished message")
    for label, budget in (("no budget (as before)", NO_BUDGET), ("--held-bytes 256 MB", 256 << 20),
                          ("--held-bytes 64 MB", 64 << 20)):
        idle, peak, elapsed, evicted, still_open = measure(args.strangers, part, budget)
        print(
            f"  {label:<22} relay RSS idle {idle:6.1f} MB, peak {peak:7.1f} MB ({peak / idle:5.1f}x idle); "
            f"closed for the budget {evicted}, still open {still_open}; {elapsed:.1f} s"
        )


if __name__ == "__main__":
    main()
