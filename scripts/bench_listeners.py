# Every listener under attack at once, as separate processes like a user runs them (`harness daemon run`,
# `harness web`): 10,000 fuzzed frames per listener (the daemon's RPC socket, the remote gateway's socket,
# the web page before and after its ticket: deep nesting, binary, invalid UTF-8, frames over the limits, cut
# short, garbage that is no frame) and 500 idle connections per listener, half of them holding part of a
# 1 MB frame. Meanwhile a normal client keeps asking; its latency is printed as a ratio against the same
# request on the quiet daemon, measured first in the same run. Printed too: both processes' resident memory
# (now and peak) and what each listener refused and dropped. Figures only; nothing here asserts a time.
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the hostile client of the tests (tests/raw_ws.py): one way to build frames

from bench_support import quantile  # noqa: E402

from harness.io import home as homes  # noqa: E402
from harness.io.client import Client  # noqa: E402
from tests import raw_ws  # noqa: E402

HARNESS = [sys.executable, "-m", "harness.cli.main"]
TEAM = "bench"
SAMPLES = 300


def fuzzed(rng: random.Random, token: str) -> bytes:
    """One hostile (or, now and then, ordinary) frame."""
    kind = rng.randrange(10)
    if kind == 0:
        return raw_ws.text(rng.choice("[{") * rng.choice((33, 1000, 100_000)))
    if kind == 1:
        return raw_ws.frame(raw_ws.BINARY, rng.randbytes(rng.randrange(1, 200)))
    if kind == 2:
        return raw_ws.frame(raw_ws.TEXT, b'{"x": "' + rng.randbytes(rng.randrange(1, 64)) + b'"}')
    if kind == 3:
        return raw_ws.text("x" * rng.choice((300_000, 1_200_000)))
    if kind == 4:
        return raw_ws.frame(raw_ws.TEXT, b'{"type": "team"', declared=rng.randrange(20, 1 << 20))
    if kind == 5:
        return rng.randbytes(rng.randrange(1, 32))  # no frame at all
    if kind == 6:
        return raw_ws.text('{"type": "team", "requestId": "r", "action": "list", "x": NaN}')
    fields = {"type": "team", "requestId": f"r{rng.randrange(1000)}", "teamId": TEAM,
              "action": rng.choice(("get", "members")), "ownerToken": rng.choice((token, "forged")),
              "machineId": "nowhere", "memberKey": rng.choice((None, "forged"))}  # fmt: skip
    return raw_ws.text(json.dumps({k: v for k, v in fields.items() if v is not None}))


class Target:
    """How to reach one listener, and a connection that finished its handshake (and hello)."""

    def __init__(self, name: str, connect: Callable[[], socket.socket], hello: bytes | None = None) -> None:
        self.name = name
        self.connect = connect
        self.hello = hello

    def open(self) -> socket.socket:
        sock = self.connect()
        if self.hello is not None:
            sock.sendall(self.hello)
        return sock


def attack(target: Target, frames: int, seed: int, token: str) -> None:
    """Send `frames` fuzzed frames, reconnecting whenever the listener closes the connection. Runs in a
    process of its own, so building frames never slows the measuring client (one interpreter lock each)."""
    rng = random.Random(seed)
    sock: socket.socket | None = None
    for _ in range(frames):
        try:
            if sock is None:
                sock = target.open()
            sock.sendall(fuzzed(rng, token))
            sock.setblocking(False)
            try:
                while sock.recv(1 << 16):
                    pass
                raise ConnectionResetError  # the listener closed it
            except BlockingIOError:
                sock.setblocking(True)
        except OSError:
            if sock is not None:
                raw_ws.close(sock)
            sock = None
    if sock is not None:
        raw_ws.close(sock)


def hold(target: Target, count: int, held: list[socket.socket]) -> None:
    """`count` connections that say nothing more (half of them in the middle of a 1 MB frame)."""
    for n in range(count):
        try:
            sock = target.open()
            if n % 2:
                sock.sendall(raw_ws.frame(raw_ws.TEXT, b"[" * 8000, declared=1 << 20))
            held.append(sock)
        except OSError:
            pass


def rss(pid: int) -> tuple[float, float]:
    """(resident now, peak resident) of a process in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def timed(call: Callable[[], Any], samples: int, pause: float = 0.0) -> list[float]:
    result = []
    for _ in range(samples):
        start = time.perf_counter()
        call()
        result.append((time.perf_counter() - start) * 1000)
        time.sleep(pause)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--frames", type=int, default=10_000, help="fuzzed frames per listener")
    parser.add_argument("--idle", type=int, default=500, help="idle connections per listener")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        home = Path(tmp) / "home"
        env = {k: v for k, v in os.environ.items() if k not in {"HARNESS_HOME", "HARNESS_MEMBER_KEY"}}
        daemon = subprocess.Popen(
            [*HARNESS, "daemon", "run", "--home", str(home)], env=env, stderr=subprocess.PIPE
        )
        while (info := homes.read_daemon_info(home)) is None or info.get("pid") != daemon.pid:
            assert daemon.poll() is None, "the daemon did not start"
            time.sleep(0.05)
        token = homes.read_owner_token(home) or ""
        rpc = Path(info["socket"])
        gateway = home / "remote" / "gateway.sock"
        with Client(rpc) as owner:
            owner.request("create", owner_token=token, fields={"id": TEAM, "name": "Bench"})
        web = subprocess.Popen(
            [*HARNESS, "web", "--team", TEAM, "--home", str(home), "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert web.stdout is not None and web.stderr is not None
        announced = json.loads(web.stdout.readline())
        port, ticket = int(announced["port"]), announced["url"].split("#ticket=")[1]

        def page() -> socket.socket:
            sock = raw_ws.open_tcp(port)
            where = f"127.0.0.1:{port}"
            raw_ws.upgrade(sock, host=where, path="/ws", origin=f"http://{where}")
            return sock

        first = page()  # the one ticket buys a session, which every later page connection presents
        first.sendall(raw_ws.text(json.dumps({"type": "hello", "ticket": ticket})))
        session = json.loads(raw_ws.reply(first) or b"{}")["session"]
        raw_ws.close(first)
        session_hello = raw_ws.text(json.dumps({"type": "hello", "session": session}))

        def local(path: Path) -> Callable[[], socket.socket]:
            def connect() -> socket.socket:
                sock = raw_ws.open_unix(path)
                raw_ws.upgrade(sock)
                return sock

            return connect

        targets = [
            Target("rpc", local(rpc)),
            Target("gateway", local(gateway)),
            Target("web (before a ticket)", page),
            Target("web (with a session)", page, session_hello),
        ]

        def ordinary() -> None:
            with Client(rpc) as client:
                client.request("get", team_id=TEAM, owner_token=token)

        quiet = timed(ordinary, SAMPLES)
        held: list[socket.socket] = []
        for target in targets[:3]:
            hold(target, args.idle, held)
        fork = multiprocessing.get_context("fork")
        attackers = [
            fork.Process(target=attack, args=(target, args.frames, seed, token))
            for seed, target in enumerate(targets)
        ]
        started = time.perf_counter()
        for process in attackers:
            process.start()
        busy: list[float] = []
        peak = {"daemon": 0.0, "web": 0.0}
        while any(process.is_alive() for process in attackers):
            busy.extend(timed(ordinary, 10, 0.01))
            peak["daemon"] = max(peak["daemon"], rss(daemon.pid)[0])
            peak["web"] = max(peak["web"], rss(web.pid)[0])
        for process in attackers:
            process.join()
        elapsed = time.perf_counter() - started
        daemon_rss, web_rss = rss(daemon.pid), rss(web.pid)
        with Client(rpc) as owner:
            status = owner.request("daemon_status", owner_token=token)
        for sock in held:
            raw_ws.close(sock)
        web.send_signal(signal.SIGTERM)
        _, web_log = web.communicate(timeout=30)
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=60)

        names = ", ".join(target.name for target in targets)
        print(f"{args.frames} fuzzed frames to each of {names} in {elapsed:.1f} s")
        print(f"every attacker finished: {all(process.exitcode == 0 for process in attackers)}")
        print(f"{args.idle} idle connections held per listener (rpc, gateway, web), half mid-frame")
        print(f"both stopped cleanly at the end: daemon {daemon.returncode == 0}, web {web.returncode == 0}")
        for name, view in status["listeners"].items():
            print(f"daemon {name}: " + ", ".join(f"{key} {value}" for key, value in view.items()))
        print(f"daemon internal errors: {status['internalErrors']}")
        print("web: " + (web_log.strip().splitlines() or ["(no report)"])[-1])
        for name, (now, high) in (("daemon", daemon_rss), ("web", web_rss)):
            print(
                f"RSS {name:6} {now:.1f} MB at the end, peak {high:.1f} MB (sampled max {peak[name]:.1f} MB)"
            )
        q50, q99 = quantile(quiet, 0.5), quantile(quiet, 0.99)
        b50, b99 = quantile(busy, 0.5), quantile(busy, 0.99)
        print(f"a normal `get` on a new connection, quiet: p50 {q50:.2f} ms p99 {q99:.2f} ms ({len(quiet)})")
        print(f"                             under attack: p50 {b50:.2f} ms p99 {b99:.2f} ms ({len(busy)})")
        print(f"ratio under attack / quiet: p50 {b50 / q50:.2f}  p99 {b99 / q99:.2f}")


if __name__ == "__main__":
    main()
