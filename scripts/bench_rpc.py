# Measures, in one run, what an agent feels of the daemon: (a) the round trip of one durable `ask` over the
# daemon's Unix socket against a bare trio-websocket echo of a frame of the same size on a Unix socket too
# (the ratio is the daemon's own cost: peer check, parse, step, fsync, reply); (b) the wall time of a cold
# `harness team ... inbox --json` process against `python3 -c pass`; (c) sustained asks per second from 8
# concurrent clients (group commit at work), in one team at a time: a team retains at most 500 exchanges (the
# seed's bound), so each takes 450 asks and the clients go on in the next. A team grown past its bound, as
# this bench once let it, is one no daemon holds, and its checkpoint (the whole team, every 256 entries)
# grew with it: a quarter of the daemon's CPU went to encoding it.
#
# The daemon (`harness daemon run`) and the echo each run in a process of their own, as a user's daemon does:
# in this process they would share its interpreter lock with the clients, and (c) measured the lock.
from __future__ import annotations

import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import trio
from bench_support import quantile, serve_local_echo

from harness.core.codec import to_json
from harness.core.limits import Limits
from harness.io import home as homes
from harness.io.client import Client, Unreachable
from harness.io.journal import JournalStore
from harness.io.ledger_runner import LIMITS_ENV

ROUND_TRIPS = 400
CLIENTS = 8
SUSTAIN_SECONDS = 3.0
COLD_RUNS = 7
START_DEADLINE_S = 60.0
# The rates lifted (a bench asks far faster than 30 a minute, and no one answers); every size is the seed's.
BENCH_LIMITS = Limits(pending_per_sender=10**6, asks_per_minute=10**7)
TEAM_ASKS = 450  # asks per team in (c), within its 500 retained exchanges
SUSTAIN_TEAMS = 40  # enough for 6,000 asks a second for SUSTAIN_SECONDS


@contextlib.contextmanager
def serve(argv: list[str], socket: Path, env: dict[str, str] | None = None) -> Iterator[None]:
    """`argv` running as a process of its own (as a user's daemon is: a client never shares its interpreter)
    while the block runs, from the moment `socket` accepts a connection; stopped (killed if it lingers) on
    the way out, whatever ends the block."""
    stderr = socket.with_name(socket.name + ".stderr")  # why it did not listen, if it did not
    with stderr.open("wb") as log:
        process = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log
        )
    try:
        deadline = time.perf_counter() + START_DEADLINE_S
        while True:
            try:
                with Client(socket):
                    break
            except (Unreachable, OSError):
                if process.poll() is not None or time.perf_counter() > deadline:
                    why = stderr.read_text(errors="replace")[-2000:]
                    raise SystemExit(f"{argv[1:4]} did not listen on {socket}: {why}") from None
                time.sleep(0.02)
        yield
    finally:
        process.terminate()
        try:
            process.wait(START_DEADLINE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def echo_server(path: Path) -> contextlib.AbstractContextManager[None]:
    return serve([sys.executable, str(Path(__file__).resolve()), "--echo", str(path)], path)


def daemon_server(home: Path) -> contextlib.AbstractContextManager[None]:
    """`harness daemon run` on `home` with its rates lifted (HARNESS_LIMITS, as tests shrink them)."""
    argv = [sys.executable, "-m", "harness.cli.main", "daemon", "run", "--home", str(home)]
    env = {**os.environ, LIMITS_ENV: json.dumps(to_json(BENCH_LIMITS))}
    return serve(argv, home / homes.SOCKET_FILE, env)


async def append_latency(directory: Path, frame: str) -> list[float]:
    """Milliseconds per durable journal append of an entry the size of the ask frame (fsync included)."""
    store, _ = await JournalStore.open(directory)
    samples = []
    try:
        for n in range(ROUND_TRIPS):
            start = time.perf_counter()
            await store.append({"n": n, "frame": frame})
            samples.append((time.perf_counter() - start) * 1000)
    finally:
        await store.aclose()
    return samples


def create_team(owner: Client, token: str, team_id: str, people: list[str]) -> dict[str, str]:
    """Create `team_id` with `people` as members; their member keys, by name."""
    members = [{"machineId": "m", "agentId": name, "name": name} for name in people]
    owner.request("create", owner_token=token, fields={"id": team_id, "name": team_id, "members": members})
    return {
        name: owner.request("key", team_id=team_id, owner_token=token, fields={"memberId": name})["memberKey"]
        for name in people
    }


def percentiles(samples: list[float]) -> tuple[float, float]:
    return quantile(samples, 0.5), quantile(samples, 0.99)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp, daemon_server(Path(tmp)):
        home = Path(tmp)
        daemon_socket = home / homes.SOCKET_FILE
        token = homes.read_owner_token(home)
        people = [f"p{i}" for i in range(CLIENTS + 1)]
        with Client(daemon_socket) as owner:
            keys = create_team(owner, token, "bench", people)

        # (a) one client, sequential asks, against an echo of the same frame.
        text = "Which endpoint returns daemon state? " * 3
        ask_ms: list[float] = []
        with Client(daemon_socket) as client:
            for n in range(ROUND_TRIPS):
                start = time.perf_counter()
                client.request(
                    "ask",
                    team_id="bench",
                    member_key=keys["p0"],
                    fields={"id": f"a{n}", "to": "p1", "text": text},
                )
                ask_ms.append((time.perf_counter() - start) * 1000)
        frame = json.dumps(
            {
                "type": "team",
                "requestId": "0123456789abcdef",
                "action": "ask",
                "teamId": "bench",
                "memberKey": keys["p0"],
                "id": "a0",
                "to": "p1",
                "text": text,
            }
        )
        echo_socket = home / "echo.sock"
        echo_ms: list[float] = []
        with echo_server(echo_socket), Client(echo_socket) as client:
            for _ in range(ROUND_TRIPS):
                start = time.perf_counter()
                client.send_raw(frame)
                client.receive_raw(10)
                echo_ms.append((time.perf_counter() - start) * 1000)
        ask50, ask99 = percentiles(ask_ms)
        echo50, echo99 = percentiles(echo_ms)
        print(
            f"(a) ask round trip   p50 {ask50:.3f} ms  p99 {ask99:.3f} ms  (durable: fsync before the reply)"
        )
        print(
            f"    echo round trip  p50 {echo50:.3f} ms  p99 {echo99:.3f} ms  (same {len(frame)}-byte frame)"
        )
        print(f"    ratio p50 {ask50 / echo50:.2f}  p99 {ask99 / echo99:.2f}")
        append50, _ = percentiles(trio.run(append_latency, home / "bench-journal", frame))
        bound = 3 * echo50 + append50
        print(
            f"    durable append alone p50 {append50:.3f} ms (a journal append of the frame, same disk); "
            f"goal: ask p50 <= 3 x echo + append = {bound:.3f} ms: {'met' if ask50 <= bound else 'missed'}"
        )

        # (b) cold CLI process.
        env = {**os.environ, "HARNESS_MEMBER_KEY": keys["p1"]}
        command = [
            str(Path(sys.executable).with_name("harness")),
            "team",
            "--home",
            tmp,
            "--team",
            "bench",
            "inbox",
            "--json",
        ]

        def wall(argv: list[str]) -> float:
            start = time.perf_counter()
            subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
            return time.perf_counter() - start

        cli = statistics.median(wall(command) for _ in range(COLD_RUNS))
        bare = statistics.median(wall(["python3", "-c", "pass"]) for _ in range(COLD_RUNS))
        print(
            f"(b) cold `harness team ... inbox --json` {cli:.3f} s (median of {COLD_RUNS}); "
            f"`python3 -c pass` {bare:.3f} s; difference {cli - bare:.3f} s; goal <= 0.25 s"
        )

        # (c) sustained asks from concurrent clients, TEAM_ASKS in each team, then on to the next.
        with Client(daemon_socket) as owner:
            teams = [create_team(owner, token, f"sustain{n}", people) for n in range(SUSTAIN_TEAMS)]
        counts = [0] * CLIENTS
        numbers = itertools.count()  # one next() at a time (the interpreter lock): each number asked once
        ran_out = threading.Event()
        deadline = time.perf_counter() + SUSTAIN_SECONDS

        def worker(index: int) -> None:
            with Client(daemon_socket) as client:
                n = 0
                while time.perf_counter() < deadline:
                    team, number = divmod(next(numbers), TEAM_ASKS)
                    if team >= len(teams):  # SystemExit here would end only this thread: said after
                        ran_out.set()
                        break
                    client.request(
                        "ask",
                        team_id=f"sustain{team}",
                        member_key=teams[team][people[index]],
                        fields={"id": f"c{number}", "to": people[index + 1], "text": text},
                    )
                    n += 1
                counts[index] = n

        threads = [threading.Thread(target=worker, args=(index,)) for index in range(CLIENTS)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        if ran_out.is_set():
            raise SystemExit(
                f"(c) asked all {SUSTAIN_TEAMS * TEAM_ASKS} asks of its teams; raise SUSTAIN_TEAMS"
            )
        print(
            f"(c) {sum(counts) / elapsed:.0f} durable asks/s from {CLIENTS} concurrent clients "
            f"({sum(counts)} in {elapsed:.1f} s; {TEAM_ASKS} in each team, then the next)"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--echo"]:
        trio.run(serve_local_echo, Path(sys.argv[2]))
    else:
        main()
