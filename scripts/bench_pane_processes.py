# What one look at a pane's processes costs (io/pane_processes.py, plain_shell_below: every desk look that
# may paste, every registration), by the full scan of /proc (every process's stat) and by the walk down the
# pane's children files, with N extra sleeping processes on the machine, spawned here: below this bench
# (anywhere else on the machine), and orphans adopted by init (or the nearest subreaper), which are children
# of an ancestor of the pane and so each read by the walk (it looks there for the pane's adopted orphans).
# The pane is an engine-like tree in a tmux server of its own (`-L`): threads, children from a worker thread,
# a `bash -c` tool with a child; no shell reads its input, so each look walks all of it.
# Times are compared only within one run, as ratios: the machine's load moves them from run to run.
#   .venv/bin/python scripts/bench_pane_processes.py [--extra 50 2000] [--looks 200]
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from harness.io import pane_processes
from harness.io.pane_processes import plain_shell_below

TMUX = ["tmux", "-f", "/dev/null"]
ENGINE = r"""
import subprocess, sys, threading, time
def sleep(): return subprocess.Popen(["sleep", "100000"])
def worker(): sleep(); time.sleep(100000)
for _ in range(3): sleep()
subprocess.Popen(["bash", "-c", "sleep 100000; true"])
for _ in range(4): threading.Thread(target=worker, daemon=True).start()
time.sleep(1); open(sys.argv[1], "w").close(); time.sleep(100000)
"""
ORPHANS = r"""
import subprocess, sys
quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(" ".join(str(subprocess.Popen(["sleep", "100000"], **quiet).pid) for _ in range(int(sys.argv[1]))))
"""  # the sleeps must not hold this helper's stdout open: its reader waits for the end of it


def machine() -> int:
    return sum(name.isdigit() for name in os.listdir("/proc"))


def stop(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def below_bench(n: int) -> Iterator[None]:
    sleeps = [subprocess.Popen(["sleep", "100000"]) for _ in range(n)]
    try:
        yield
    finally:
        stop([p.pid for p in sleeps])
        for p in sleeps:
            p.wait()


@contextlib.contextmanager
def adopted_by_init(n: int) -> Iterator[None]:
    done = subprocess.run([sys.executable, "-c", ORPHANS, str(n)], capture_output=True, text=True, check=True)
    pids = [int(pid) for pid in done.stdout.split()]
    try:
        yield
    finally:
        stop(pids)  # init reaps them


@contextlib.contextmanager
def pane(tmp: Path) -> Iterator[tuple[int, str]]:
    socket = f"harness-bench-panes-{os.getpid()}"
    ready = tmp / "ready"
    command = [sys.executable, "-c", ENGINE, str(ready)]
    subprocess.run([*TMUX, "-L", socket, "new-session", "-d", "-s", "bench", "--", *command], check=True)
    server = 0
    try:
        found = subprocess.run(
            [*TMUX, "-L", socket, "display-message", "-p", "-t", "bench", "#{pid} #{pane_pid} #{pane_tty}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        server, pane_pid, tty = int(found[0]), int(found[1]), found[2]
        deadline = time.monotonic() + 30
        while not ready.exists():
            if time.monotonic() > deadline:
                raise SystemExit("the pane's engine did not start")
            time.sleep(0.05)
        yield pane_pid, tty
    finally:
        subprocess.run([*TMUX, "-L", socket, "kill-server"], capture_output=True, check=False)
        if server:
            stop([server])


def per_look(look: Callable[[], object], looks: int) -> float:
    """Median seconds of one look."""
    samples = []
    for _ in range(looks):
        began = time.perf_counter()
        look()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def measure(pane_pid: int, tty: str, looks: int) -> tuple[float, float]:
    """(full scan, walk) per look, interleaved in rounds so that the machine's drift hits both alike."""
    process = pane_processes._process("/proc", str(pane_pid))
    assert process is not None
    found = pane_processes._pane_processes("/proc", process)
    if found is None:
        raise SystemExit("the walk by children files is not available here (no CONFIG_PROC_CHILDREN?)")
    assert plain_shell_below(pane_pid, tty) == plain_shell_below(pane_pid, tty, full_scan=True) is None
    full: list[float] = []
    walk: list[float] = []
    for _ in range(5):
        full.append(per_look(lambda: plain_shell_below(pane_pid, tty, full_scan=True), looks // 5 or 1))
        walk.append(per_look(lambda: plain_shell_below(pane_pid, tty), looks // 5 or 1))
    return statistics.median(full), statistics.median(walk)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the cost of one look at a pane's processes")
    parser.add_argument("--extra", type=int, nargs="+", default=[50, 2000], help="extra sleeping processes")
    parser.add_argument("--looks", type=int, default=200, help="looks measured per figure")
    args = parser.parse_args(argv)
    shapes = {"below the bench": below_bench, "adopted by init": adopted_by_init}
    with tempfile.TemporaryDirectory() as tmp, pane(Path(tmp)) as (pane_pid, tty):
        first = pane_processes._process("/proc", str(pane_pid))
        tree = len((first and pane_processes._pane_processes("/proc", first)) or {})
        print(f"one look at a pane of {tree} processes; median ms per look ({args.looks} looks each)")
        heading = f"{'on machine':>10s} {'full scan':>10s} {'walk':>8s} {'full/walk':>9s}"
        print(f"  {'extra sleeping processes':34s} {heading}")
        figures: dict[tuple[str, int], tuple[float, float]] = {}
        for shape, spawn in shapes.items():
            for n in args.extra:
                with spawn(n):
                    total = machine()
                    full, walk = figures[shape, n] = measure(pane_pid, tty, args.looks)
                figure = f"{total:10d} {full * 1e3:10.3f} {walk * 1e3:8.3f} {full / walk:9.1f}"
                print(f"  {f'{n} {shape}':34s} {figure}")
        low, high = min(args.extra), max(args.extra)
        if low != high:
            print(f"  growth from {low} to {high} extra processes (cost at {high} / cost at {low}):")
            for shape in shapes:
                (full_low, walk_low), (full_high, walk_high) = figures[shape, low], figures[shape, high]
                growth = f"full scan {full_high / full_low:6.2f}   walk {walk_high / walk_low:6.2f}"
                print(f"    {shape:32s} {growth}")


if __name__ == "__main__":
    main()
