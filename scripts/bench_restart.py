# Why: issue 18 names the daemon's restart at the seed's bounds (100 teams x 450 exchanges) as slow (10-11 s
# until it listens, 7.5-9 s more until idle, 180 MB peak) and no benchmark repeated it. This one builds such a
# data directory with the real io stack in this process (a Daemon, asks and replies issued concurrently, no
# terminals: notices wait queued or are refused once the desk is full, and are withdrawn as exchanges end),
# so the journals, checkpoints and delivery records are what a daemon writes. Then it restarts `harness daemon
# run` on a copy as a user does and prints the time until it listens, until it is idle (its CPU time stops
# growing), its CPU seconds (and those spent after it listened) and peak RSS, beside the same daemon on an
# empty data directory; and, with --profile, the harness functions a restart spends its time in (cProfile,
# cumulative).
#
#     .venv/bin/python scripts/bench_restart.py --build /tmp/bench-restart   # build once (minutes), measure
#     .venv/bin/python scripts/bench_restart.py --dir /tmp/bench-restart --runs 3 --profile
#
# Only `asks_per_minute` is lifted for the build (450 asks per team at 30 a minute would take 15 minutes);
# the measured daemon gets the same limits through HARNESS_LIMITS, as the daemon that wrote the directory had.
from __future__ import annotations

import argparse
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import attrs
import trio

from harness.core.codec import to_json
from harness.core.commands import Ask, Reply
from harness.core.errors import Rejected
from harness.core.limits import DEFAULT_LIMITS, Limits
from harness.io import home as homes
from harness.io.client import Client, RemoteError, Unreachable
from harness.io.daemon import CHECK_ENV, Daemon
from harness.io.ledger_runner import LIMITS_ENV

ROOT = Path(__file__).resolve().parent.parent
MEMBERS = ("ada", "bo", "cy")  # each member asks the next one; each is its own agent on this machine
OPEN_PER_TEAM = 6  # exchanges left open at the end (their notices are what a restart must restate)
LIMITS = attrs.evolve(DEFAULT_LIMITS, asks_per_minute=100_000)
TICK_S = 0.1  # CPU sampling period for "idle"
# Idle: CPU time grew by at most one clock tick (10 ms: /proc/PID/stat's resolution) over QUIET_WINDOW_S.
QUIET_CPU_S = 0.015
QUIET_WINDOW_S = 1.0
AFTER_S = 3.0  # then the CPU the idle daemon still spends is measured over this long
DEADLINE_S = 600.0  # a restart that takes longer is reported as failed rather than waited on forever
MARKER = "bench-restart.json"  # names a data directory this script built (and so may replace)
HARNESS_DIRS = tuple(str(ROOT / part) + os.sep for part in ("core", "io", "cli", "models"))


# --- build --------------------------------------------------------------------------------------------------


async def build(home: Path, teams: int, exchanges: int, limits: Limits) -> None:
    daemon = Daemon(home, limits=limits, log=lambda line: None)
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        token = homes.owner_token(home)
        for team in range(teams):  # through the RPC: `create` also makes the team's board follow its roster
            members = [
                {"machineId": daemon.machine_id, "agentId": f"agent-t{team}-{name}", "name": name}
                for name in MEMBERS
            ]
            create = partial(_request, daemon.socket_path, token, "create", id=f"t{team}", name=f"t{team}")
            await trio.to_thread.run_sync(partial(create, members=members))
        keys = {
            (team_id, member): key
            for team_id, team in daemon.durable.teams.items()
            for key, member in team.keys.items()
        }
        done = [0]

        async def lane(team: int, asker: int) -> None:
            """One member's questions to the next member, each answered before the next is asked."""
            team_id = f"t{team}"
            ids = {m.name: m.id for m in daemon.durable.teams[team_id].members.values()}
            ask_key = keys[team_id, ids[MEMBERS[asker]]]
            to = MEMBERS[(asker + 1) % len(MEMBERS)]
            reply_key = keys[team_id, ids[to]]
            for n in range(asker, exchanges, len(MEMBERS)):
                still_open = n >= exchanges - OPEN_PER_TEAM
                question = f"q{n}"
                text = f"Question {n} of team {team_id}: which port does service {n % 17} listen on?"
                ttl = limits.ttl_max_ms if still_open else None
                _accepted(
                    await daemon.submit(Ask(0, team_id, question, to, text, ttl_ms=ttl, member_key=ask_key))
                )
                if not still_open:
                    answer = f"Service {n % 17} listens on port {8000 + n % 17}; see deploy/ports.toml."
                    _accepted(await daemon.submit(Reply(0, team_id, question, answer, member_key=reply_key)))
                done[0] += 1

        async def progress() -> None:
            while True:
                await trio.sleep(10)
                rate = done[0] / (time.perf_counter() - started)
                print(f"  built {done[0]:,}/{teams * exchanges:,} exchanges ({rate:,.0f}/s)", flush=True)

        async with trio.open_nursery() as lanes:
            lanes.start_soon(progress)
            async with trio.open_nursery() as askers:
                for team in range(teams):
                    for asker in range(len(MEMBERS)):
                        askers.start_soon(lane, team, asker)
            lanes.cancel_scope.cancel()
        await _settled(daemon)
        assert daemon.desk is not None
        records = len(daemon.desk.desk.notices)
        daemon.stop()
    total = sum(len(team.exchanges) for team in daemon.durable.teams.values())
    print(
        f"  built {total:,} exchanges in {len(daemon.durable.teams)} teams, {records:,} desk records "
        f"(bound {limits.delivery_records:,}), in {time.perf_counter() - started:.0f} s"
    )
    (home / MARKER).write_text(json.dumps({"teams": teams, "exchanges": exchanges}) + "\n")


def _request(socket: Path, token: str, action: str, **fields: object) -> object:
    with Client(socket) as client:
        return client.request(action, owner_token=token, fields=fields)


def _accepted(outcome: object) -> None:
    if isinstance(outcome, Rejected):
        raise SystemExit(f"the build was refused: {outcome}")


async def _settled(daemon: Daemon) -> None:
    """Until the delivery reports stop changing the teams for two seconds."""
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < 2.0:
        await trio.sleep(0.2)
        revisions = sum(team.revision for team in daemon.durable.teams.values())
        if revisions != last:
            last, quiet_since = revisions, time.monotonic()


# --- measure ------------------------------------------------------------------------------------------------


@attrs.frozen
class Restart:
    listening_s: float
    idle_s: float  # from the start of the process until its CPU time stopped growing
    cpu_s: float  # CPU seconds until idle
    # CPU seconds from listening until idle: the work a start leaves for after it listens. "idle" above is
    # later than that work's end by the quiet window's reach: a blip inside it (the traces' group fsync, 1 s
    # after the start wrote them) moves "idle" past the blip, though the daemon answered all along.
    cpu_after_listening_s: float
    background_ms_s: float  # CPU ms per second in the AFTER_S seconds after idle
    peak_rss_mb: float


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _listens(home: Path, token: str) -> bool:
    try:
        with Client(home / homes.SOCKET_FILE) as client:
            client.request("daemon_status", owner_token=token, timeout=DEADLINE_S)
    except (Unreachable, RemoteError, OSError):
        return False
    return True


def _environment(limits: Limits) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != CHECK_ENV}
    env[LIMITS_ENV] = json.dumps(to_json(limits))
    return env


def restart(home: Path, limits: Limits, profile: Path | None = None) -> Restart:
    """Start `harness daemon run` on `home`, time it to listening and to idle, then SIGTERM it."""
    runner = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
    argv = [sys.executable, *runner, "-m", "harness.cli.main", "daemon", "run", "--home", str(home)]
    token = homes.owner_token(home)
    started = time.perf_counter()
    process = subprocess.Popen(
        argv,
        env=_environment(limits),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while not _listens(home, token):
            if process.poll() is not None or time.perf_counter() - started > DEADLINE_S:
                raise SystemExit(
                    f"the daemon did not listen: {process.stderr.read().decode()[-2000:]}"
                    if process.stderr
                    else "the daemon did not listen"
                )
            time.sleep(0.01)
        listening, cpu_listening = time.perf_counter() - started, _cpu_s(process.pid)
        idle_at, cpu, background = until_idle(process.pid, started)
        peak = _peak_rss_mb(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.returncode != 0:
        raise SystemExit(f"the daemon exited {process.returncode}")
    return Restart(listening, idle_at, cpu, cpu - cpu_listening, background * 1000, peak)


def until_idle(pid: int, started: float) -> tuple[float, float, float]:
    """When the daemon went idle (seconds since `started`), its CPU seconds then, and its CPU s/s in the
    AFTER_S seconds after (an idle daemon still looks at agents with queued notices each poll)."""
    samples: list[tuple[float, float]] = []  # (seconds since started, CPU seconds)
    span = round(QUIET_WINDOW_S / TICK_S)
    while not samples or samples[-1][0] < DEADLINE_S:
        samples.append((time.perf_counter() - started, _cpu_s(pid)))
        if len(samples) > span and samples[-1][1] - samples[-1 - span][1] < QUIET_CPU_S:
            idle_at, cpu = samples[-1 - span]
            time.sleep(AFTER_S)
            return (
                idle_at,
                cpu,
                (_cpu_s(pid) - samples[-1][1]) / (time.perf_counter() - started - samples[-1][0]),
            )
        time.sleep(TICK_S)
    raise SystemExit("the daemon never went idle")


def measured(source: Path, scratch: Path, limits: Limits, runs: int) -> list[Restart]:
    """`runs` restarts, each on a fresh copy of `source` (a restart writes: reports, checkpoints)."""
    results = []
    for run in range(runs):
        home = scratch / f"run{run}"
        shutil.copytree(source, home, symlinks=True)
        results.append(restart(home, limits))
        shutil.rmtree(home)
    return results


def show(title: str, results: list[Restart], baseline: Restart | None) -> None:
    best = min(results, key=lambda r: r.idle_s)
    print(f"  {title}:")
    for result in results:
        print(
            f"    listening {result.listening_s:6.2f} s   idle {result.idle_s:6.2f} s "
            f"(+{result.idle_s - result.listening_s:5.2f})   CPU {result.cpu_s:6.2f} s "
            f"({result.cpu_after_listening_s:4.2f} after listening)   "
            f"idle CPU {result.background_ms_s:4.0f} ms/s   peak RSS {result.peak_rss_mb:6.1f} MB"
        )
    if baseline is not None:
        print(
            f"    ratio to the empty directory (best run): "
            f"listening x{best.listening_s / baseline.listening_s:.1f}"
            f"  idle x{best.idle_s / baseline.idle_s:.1f}  CPU x{best.cpu_s / baseline.cpu_s:.1f}"
            f"  peak RSS x{best.peak_rss_mb / baseline.peak_rss_mb:.1f}"
        )


def profiled(source: Path, scratch: Path, limits: Limits, top: int, out: Path) -> None:
    """One restart under cProfile (wall-clock time) and the harness functions it spent that time in."""
    home = scratch / "profiled"
    shutil.copytree(source, home, symlinks=True)
    result = restart(home, limits, out)
    shutil.rmtree(home)
    print(
        f"  profiled restart (cProfile slows it): listening {result.listening_s:.2f} s, "
        f"idle {result.idle_s:.2f} s, profile {out}"
    )
    rows: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    rows = pstats.Stats(str(out)).stats  # type: ignore[attr-defined]  # pstats keeps its table untyped
    # The process's entry functions hold the wait in epoll (the idle second, the shutdown): they say nothing.
    waited = sum(row[2] for key, row in rows.items() if "epoll" in key[2])
    ours = [item for item in rows.items() if item[0][0].startswith(HARNESS_DIRS) and item[1][3] < waited]
    ours.sort(key=lambda item: item[1][3], reverse=True)
    print(f"  top {top} harness functions by cumulative time (entry functions that wait left out):")
    print(f"    {'cum s':>7}  {'own s':>6}  {'calls':>9}")
    for (file, line, name), (_, calls, own, cumulative, _) in ours[:top]:
        print(f"    {cumulative:7.2f}  {own:6.2f}  {calls:>9,}  {_short(file)}:{line} {name}")
    mine = sorted(rows.items(), key=lambda item: item[1][2], reverse=True)
    print(f"  top {top} functions of any code by own time (epoll: {waited:.2f} s waiting):")
    for (file, line, name), (_, calls, own, cumulative, _) in mine[:top]:
        print(f"    {cumulative:7.2f}  {own:6.2f}  {calls:>9,}  {_short(file)}:{line} {name}")


def _short(file: str) -> str:
    path = Path(file)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else "/".join(path.parts[-2:])


def main() -> None:
    parser = argparse.ArgumentParser(description="daemon restart at the seed's bounds")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--build", type=Path, help="build the data directory here (replacing it), then measure"
    )
    where.add_argument("--dir", type=Path, help="measure a directory built before with --build")
    parser.add_argument("--teams", type=int, default=100)
    parser.add_argument("--exchanges", type=int, default=450)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="also one restart under cProfile")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--profile-out", type=Path, default=Path("/tmp/restart.prof"))
    args = parser.parse_args()
    source = args.build or args.dir
    if (source.exists() and not (source / MARKER).is_file()) or (args.dir and not source.exists()):
        raise SystemExit(f"{source} is not a data directory built by this script ({MARKER}): use --build")
    if args.build is not None:
        shutil.rmtree(source, ignore_errors=True)
        print(f"building {args.teams} teams x {args.exchanges} exchanges in {source}", flush=True)
        trio.run(build, source, args.teams, args.exchanges, LIMITS)
    size = sum(path.stat().st_size for path in source.rglob("*") if path.is_file())
    built = json.loads((source / MARKER).read_text())
    print(
        f"restart of `harness daemon run` on {source} ({built['teams']} teams x {built['exchanges']} "
        f"exchanges, {size / 2**20:.0f} MB on disk); the machine may be loaded: figures as measured",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-restart-", dir="/tmp") as tmp:
        scratch = Path(tmp)
        empty = scratch / "empty"
        restart(homes.ensure_home(empty), LIMITS)  # the first start makes the directory's files
        baseline = restart(empty, LIMITS)
        show("empty data directory (baseline)", [baseline], None)
        if args.runs > 0:
            show(f"{source.name}", measured(source, scratch, LIMITS, args.runs), baseline)
        if args.profile:
            profiled(source, scratch, LIMITS, args.top, args.profile_out)


if __name__ == "__main__":
    main()
