# Benchmark of the terminal layer (figures, not a test): a tmux command over the long-lived control-mode
# client against a tmux process per command (p50/p99), the engine profiles' cost per screen, how long a bare
# bracketed paste takes to show in an idle pane, and ask -> visible: from a member's `ask` returning to the
# notice showing in the peer's pane, through a real daemon, its delivery desk and TmuxTerminals (the peer is
# the demo's scripted agent). It runs its own tmux server (`-L harness-bench-PID`, its own HOME) and stops
# it by its socket and PID.
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio
from bench_support import quantile

from harness.core.limits import DEFAULT_LIMITS
from harness.io.profiles import classify
from harness.io.tmux import ControlRunner, ProcessRunner, Runner, capture, kill_server, new_session, paste

SCREENS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "screens"


def _quantiles(samples: list[float]) -> str:
    p50, p99 = quantile(samples, 0.5), quantile(samples, 0.99)
    return f"p50 {p50 * 1e3:8.3f} ms   p99 {p99 * 1e3:8.3f} ms   (n={len(samples)})"


async def _timed(n: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples


async def round_trips(socket: str, n: int) -> None:
    control = ControlRunner(socket)
    process = ProcessRunner(socket)
    try:
        await control.run("display-message", "-p", "warm")
        for name, runner, count in (("control mode", control, n), ("process per command", process, n // 10)):
            samples = await _timed(count, lambda r=runner: r.run("display-message", "-p", "x"))  # type: ignore[misc]
            print(f"  {name:22} display-message  {_quantiles(samples)}")
        plan = (("control mode", control, n // 4), ("process per command", process, n // 20))
        for name, runner, count in plan:
            samples = await _timed(count, lambda r=runner: capture(r, "bench"))  # type: ignore[misc]
            print(f"  {name:22} capture-pane -e  {_quantiles(samples)}")
    finally:
        await control.aclose()


def classify_cost(rounds: int) -> None:
    for path in sorted(SCREENS.rglob("*.ansi.txt")):
        engine = path.parent.name.split("-")[0]
        raw = path.read_text(encoding="utf-8")
        start = time.perf_counter()
        for _ in range(rounds):
            classify(engine, raw)
        each = (time.perf_counter() - start) / rounds
        print(f"  {path.relative_to(SCREENS)!s:42} {len(raw):6} chars  {each * 1e6:8.1f} µs")


async def paste_latency(runner: Runner, n: int) -> None:
    samples = []
    for i in range(n):
        marker = f"echo paste-marker-{i}"
        start = time.perf_counter()
        await paste(runner, "bench", marker)
        while marker not in await capture(runner, "bench"):
            await trio.sleep(0)
        samples.append(time.perf_counter() - start)
        await runner.run("send-keys", "-t", "bench", "C-u")  # our own bench pane: clear our own paste
    print(f"  load-buffer + paste-buffer -p until visible  {_quantiles(samples)}")


SETTLE_S = DEFAULT_LIMITS.write_settle_ms / 1000 + 0.3


async def ask_latency(socket: str, asks: int, poll_ms: int) -> None:
    from harness.io import home as homes
    from harness.io.agents import AgentRegistry
    from harness.io.client import Client
    from harness.io.daemon import Daemon
    from harness.io.desk_runner import RunnerTiming
    from harness.io.tmux import TmuxTerminals

    made: list[TmuxTerminals] = []

    def terminals(registry: AgentRegistry) -> TmuxTerminals:
        made.append(TmuxTerminals.from_registry(registry))
        return made[-1]

    home = Path(os.environ["HOME"]) / "daemon"
    agent = [sys.executable, "-m", "harness.cli.demo_agent", "--name", "peer", "--answer", "ok"]
    pane = await new_session(socket, "peer", agent, config="/dev/null")
    runner = ControlRunner(socket)
    daemon = Daemon(
        home, terminals=terminals, runner_timing=RunnerTiming(poll_ms=poll_ms), log=lambda _: None
    )

    def script() -> list[float]:
        token = homes.read_owner_token(home)
        with Client(daemon.socket_path) as client:
            peer = {"agentId": "agent-peer", "name": "peer", "engine": "shell"}
            fields = {**peer, "tmux": {"socket": socket, "target": pane}, "startedBy": "daemon"}
            client.request("agent_register", owner_token=token, fields=fields)
            members = [
                {"machineId": daemon.machine_id, "agentId": "agent-peer", "name": "peer", "role": "peer"},
                {"machineId": daemon.machine_id, "agentId": "no-terminal", "name": "asker", "role": "asker"},
            ]
            client.request("create", owner_token=token, fields={"id": "b", "name": "B", "members": members})
            key = client.request("key", team_id="b", owner_token=token, fields={"memberId": "asker"})[
                "memberKey"
            ]
            samples = []
            for i in range(asks):
                start = time.perf_counter()
                client.request(
                    "ask", team_id="b", member_key=key, fields={"id": f"b{i}", "to": "peer", "text": "?"}
                )
                while f"Question b{i} from asker" not in trio.from_thread.run(capture, runner, pane):
                    time.sleep(0.002)
                samples.append(time.perf_counter() - start)
                while (
                    client.request("status", team_id="b", member_key=key, fields={"questionId": f"b{i}"})[
                        "state"
                    ]
                    != "answered"
                ):
                    time.sleep(0.01)
                # The goal is about an idle recipient: let the desk's settle time after the last paste pass
                # (a pane that was written into within write_settle_ms is, deliberately, not yet "idle").
                time.sleep(SETTLE_S)
            return samples

    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        try:
            samples = await trio.to_thread.run_sync(script)
        finally:
            for made_terminals in made:
                await made_terminals.aclose()
            await runner.aclose()
            daemon.stop()
    print(f"  desk poll {poll_ms} ms; each ask waits {SETTLE_S:.1f} s after the last answer (idle recipient)")
    print("  (the first question also waited for the fresh agent's screen to settle)")
    print(f"  first ask -> visible  {samples[0] * 1e3:8.1f} ms")
    print(f"  later asks -> visible {_quantiles(samples[1:])}")


async def main(n: int, asks: int, poll_ms: int) -> None:
    socket = f"harness-bench-{os.getpid()}"
    rc = Path(os.environ["HOME"]) / "rc"
    rc.write_text("PS1='bench$ '\n")
    await new_session(socket, "bench", ["bash", "--noprofile", "--rcfile", str(rc), "-i"], config="/dev/null")
    runner = ControlRunner(socket)
    try:
        with trio.fail_after(10):
            while "bench$" not in await capture(runner, "bench"):
                await trio.sleep(0.02)
        print("tmux round trip")
        await round_trips(socket, n)
        print("bare paste into an idle pane (bash)")
        await paste_latency(runner, max(20, n // 20))
        print("ask -> notice visible in the peer's pane (daemon, desk runner, TmuxTerminals, demo agent)")
        await ask_latency(socket, asks, poll_ms)
    finally:
        found = await runner.run("display-message", "-p", "#{pid} #{socket_path}")
        await runner.aclose()
        await kill_server(socket)
        for line in found:
            pid, path = line.split(" ", 1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
            Path(path).unlink(missing_ok=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=2000, help="control-mode round trips (processes: n/10)")
    parser.add_argument("--asks", type=int, default=11, help="questions asked through the daemon")
    parser.add_argument("--poll-ms", type=int, default=500, help="the desk runner's poll interval")
    args = parser.parse_args()
    print("engine profile cost per screen (classify, colour codes included)")
    classify_cost(500)
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as home:
        os.environ["HOME"] = home
        os.environ.pop("TMUX", None)
        trio.run(main, args.n, args.asks, args.poll_ms)
