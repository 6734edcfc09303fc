# Measures how long the commands people and agents run most take to start and finish, each in a new process
# (`harness --help`, `daemon status`, `agent list`, the `team` calls), against `python -c pass` measured in
# the same run: ratios, so that a loaded machine shows the same figures as an idle one. A daemon runs in a
# throw-away data directory with a team of two members and one question, so each command does its real
# work. Issue 17 asks for 0.25 s cold, which is about 8 times `python -c pass` on an idle machine.
# Usage: .venv/bin/python scripts/bench_cli_start.py [ROUNDS]
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
HARNESS = [sys.executable, "-m", "harness.cli.main"]


def wall(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


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
                "harness daemon --help (Typer)": ["daemon", "--help"],
            }
            baseline = statistics.median(wall([sys.executable, "-c", "pass"], env) for _ in range(ROUNDS))
            print(f"python -c pass: {baseline * 1000:.0f} ms (median of {ROUNDS}); ratios against it")
            print(f"{'command':<34} {'median':>8} {'ratio':>6}")
            for name, args in commands.items():
                median = statistics.median(wall([*HARNESS, *args], env) for _ in range(ROUNDS))
                print(f"{name:<34} {median * 1000:6.0f} ms {median / baseline:6.1f}")
        finally:
            harness(env, "daemon", "stop")


if __name__ == "__main__":
    main()
