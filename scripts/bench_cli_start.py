# Measures how long each top-level command takes to start and finish, each in a new process: a real call
# where one is safe and quick (`daemon status`, `agent list`, the `team` calls, `doctor`, `trace`, `session`,
# `channels`, `pair list`, `check --list`), and the help of every top-level command (`web`, `demo`, `relay`,
# ... start servers or terminals), against `python -c pass` measured in the same run: ratios, so that a
# loaded machine shows the same figures as an idle one. A daemon runs in a throw-away data directory with a
# team of two members and one question, so each command does its real work. Issue 17 asks for 0.25 s cold,
# which is about 8 times `python -c pass` on an idle machine.
# Usage: .venv/bin/python scripts/bench_cli_start.py [ROUNDS]
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.cli.fast import TOP

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
HARNESS = [sys.executable, "-m", "harness.cli.main"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run: on a loaded machine the CPU time varies less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def medians(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    runs = [timed(argv, env) for _ in range(ROUNDS)]
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def harness(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([*HARNESS, *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        home = Path(directory) / "home"
        env = {**os.environ, "HARNESS_HOME": str(home), "COLUMNS": "80"}
        harness(env, "daemon", "start")
        try:
            team_file = Path(directory) / "team.json"
            members = ["--member", "alice=a1", "--member", "bob=b1"]
            harness(env, "team", "init", *members, "--out", str(team_file))
            team = json.loads(team_file.read_text())["id"]
            harness(env, "team", "create", "--file", str(team_file), "--json")
            harness(env, "team", "--team", team, "ask", "bob", "a question", "--from", "alice", "--json")
            question = json.loads(harness(env, "team", "--team", team, "status", "--json"))["exchanges"][0]
            commands = {
                "harness --help": ["--help"],
                "harness team --help": ["team", "--help"],
                "harness daemon status": ["daemon", "status"],
                "harness agent list": ["agent", "list"],
                "harness team list": ["team", "list"],
                "harness team members": ["team", "--team", team, "members"],
                "harness team get": ["team", "--team", team, "get"],
                "harness team status PREFIX": ["team", "--team", team, "status", question["id"][:6]],
                "harness team inbox --json": ["team", "--team", team, "inbox", "--json"],
                "harness doctor": ["doctor"],
                "harness trace summary --team": ["trace", "summary", "--team", team],
                "harness session status": ["session", "status"],
                "harness channels status": ["channels", "status"],
                "harness pair list": ["pair", "list"],
                "harness check --list": ["check", "--list"],
                "harness daemon status --nope (error)": ["daemon", "status", "--nope"],
                **{f"harness {name} --help": [name, "--help"] for name in TOP if name != "team"},
            }
            baseline, baseline_cpu = medians([sys.executable, "-c", "pass"], env)
            print(
                f"python -c pass: {baseline * 1000:.0f} ms, {baseline_cpu * 1000:.0f} ms CPU "
                f"(medians of {ROUNDS}); ratios against it"
            )
            print(f"{'command':<38} {'median':>8} {'ratio':>6} {'CPU':>8} {'ratio':>6}")
            for name, args in commands.items():
                median, cpu = medians([*HARNESS, *args], env)
                print(
                    f"{name:<38} {median * 1000:6.0f} ms {median / baseline:6.1f} "
                    f"{cpu * 1000:5.0f} ms {cpu / baseline_cpu:6.1f}",
                    flush=True,
                )
        finally:
            harness(env, "daemon", "stop")


if __name__ == "__main__":
    main()
