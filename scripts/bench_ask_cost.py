# The cost of one ask, counted rather than timed (issue 18): a daemon in this process and a team of two
# members on this machine. It prints, with where each fsync came from (which store, file or directory, and
# the journal entries it made durable):
# - one `ask` and one `reply` with no terminal attached (the notice waits `queued`, as for an agent that is
#   not started), from the request until the owner's view holds the desk's report;
# - one `ask` end to end with a terminal attached (tests/fake_tui.py in a real tmux server on its own -L
#   socket), from the request until the owner's view says the notice was `accepted`;
# - durable asks/s with CLIENTS concurrent clients (each its own connection, all in one client process), the
#   event loop's CPU per ask and its task steps per ask (a count that a loaded machine does not blur), as
#   ratios against one bare fsynced append of an ask's bytes measured in the same run on the same disk.
# With --baseline every measurement runs twice, the first time with each team trace write fsynced at once (as
# before the trace rode the group commit: TeamTraces.sync_delay_ms = 0), and the figures print side by side.
from __future__ import annotations

import collections
import itertools
import json
import os
import secrets
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from harness.core.limits import DEFAULT_LIMITS
from harness.io import home as homes
from harness.io.agents import AgentRegistry
from harness.io.client import Client
from harness.io.daemon import Daemon
from harness.io.desk_runner import RunnerTiming
from harness.io.journal_files import encode_record
from harness.io.tmux import TmuxTerminals, kill_server, new_session

ROUNDS = 8  # pending_per_sender: one sender keeps at most 8 questions open
CLIENTS = 8
ASKS_PER_CLIENT = 200  # all clients ask in one team (its exchanges bound is lifted for the run)
BARE_APPENDS = 200
FAKE_TUI = Path(__file__).resolve().parent.parent / "tests" / "fake_tui.py"
# Only the bounds that would refuse a burst of asks are lifted for the throughput run.
BURST = attrs.evolve(
    DEFAULT_LIMITS,
    exchanges=CLIENTS * ASKS_PER_CLIENT,
    pending_per_sender=ASKS_PER_CLIENT,
    asks_per_minute=100_000,
    queued_per_agent=CLIENTS * ASKS_PER_CLIENT,
)


class Counters:
    """os.fsync calls while `counting` is on, by store, kind (file or directory) and the entries they made
    durable (read back from the journal file: the types of the records appended since its last fsync)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.counts: collections.Counter[str] = collections.Counter()
        self.counting = False
        self.detailed = True  # off where reading the journals back would slow what is measured
        self._fsync = os.fsync
        self._offsets: dict[str, int] = {}

    def install(self) -> None:
        def fsync(fd: int) -> None:
            self._fsync(fd)
            if self.counting:
                self.counts[self._describe(fd) if self.detailed else "fsync"] += 1

        os.fsync = fsync

    def uninstall(self) -> None:
        os.fsync = self._fsync

    def total(self) -> int:
        return sum(self.counts.values())

    def _describe(self, fd: int) -> str:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        where = str(path.relative_to(self.home)) if path.is_relative_to(self.home) else str(path)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return f"{_store(where)}: directory"
        if not path.name.startswith("journal-"):
            return f"{_store(where)}: file"
        with open(path, "rb") as journal:
            journal.seek(self._offsets.get(str(path), 0))
            lines = journal.read().splitlines()
            self._offsets[str(path)] = journal.tell()
        kinds = [str(json.loads(line)["entry"].get("type")) for line in lines if line.endswith(b"}")]
        runs = [(kind, len(list(same))) for kind, same in itertools.groupby(kinds)]
        return f"{_store(where)}: file [{' '.join(k if n == 1 else f'{k} x{n}' for k, n in runs)}]"


def _store(where: str) -> str:
    parts = where.split("/")
    if parts[:2] == ["teams", "ledgers"]:
        return "ledger journal"
    if parts[:2] == ["teams", "delivery"]:
        return "desk journal"
    if parts[0] == "traces":
        return "team trace"
    return where


def request(
    socket: Path, token: str, action: str, team: str | None = None, key: str | None = None, **fields: Any
) -> Any:
    with Client(socket) as client:
        owner = None if key else token
        return client.request(action, team_id=team, owner_token=owner, member_key=key, fields=fields)


async def until(done: Callable[[], bool], seconds: float = 60) -> None:
    with trio.fail_after(seconds):
        while not done():
            await trio.sleep(0.005)


def delivery(daemon: Daemon, team: str, question: str, *, answered: bool = False) -> str | None:
    found = daemon.durable.teams[team].exchanges.get(question)
    view = None if found is None else found.answer_delivery if answered else found.delivery
    return None if view is None else view.state


def daemon_of(home: Path, trace_sync_ms: int | None, **options: Any) -> Daemon:
    """The measured daemon; `trace_sync_ms` replaces its team traces' fsync delay (None: the daemon's own)."""
    daemon = Daemon(home, log=lambda line: None, **options)
    if trace_sync_ms is not None:
        daemon.traces.sync_delay_ms = trace_sync_ms
    return daemon


class Bench:
    """One daemon of this process and the calls the measurements make to it."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.token = homes.read_owner_token(daemon.home)

    async def call(self, action: str, team: str | None = None, key: str | None = None, **fields: Any) -> Any:
        socket, token = self.daemon.socket_path, self.token
        return await trio.to_thread.run_sync(lambda: request(socket, token, action, team, key, **fields))

    async def team(self, team_id: str, names: tuple[str, ...] = ("alice", "bob")) -> list[str]:
        """Create the team, each member on its own agent of this machine; the members' keys, in order."""
        members = [{"machineId": self.daemon.machine_id, "agentId": f"agent-{n}", "name": n} for n in names]
        await self.call("create", id=team_id, name=team_id, members=members)
        return [(await self.call("key", team_id, memberId=name))["memberKey"] for name in names]


async def no_terminal(home: Path, counters: Counters, trace_sync_ms: int | None) -> dict[str, float]:
    """fsyncs and team revisions per ask and per reply, no terminal attached."""
    daemon = daemon_of(home, trace_sync_ms)
    per: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        bench = Bench(daemon)
        alice, bob = await bench.team("bench")
        await trio.sleep(0.5)  # the introductions' reports settle before counting
        revision0 = daemon.durable.teams["bench"].revision
        counters.counting = True
        for n in range(ROUNDS):
            await bench.call("ask", "bench", key=alice, id=f"q{n}", to="bob", text="Which port?")
            await until(lambda: delivery(daemon, "bench", f"q{n}") is not None)  # noqa: B023
            await trio.sleep(0.2)  # whatever else the step set off (a second report) lands in the count too
        counters.counting = False
        per["fsyncs per ask (request to report recorded)"] = counters.total() / ROUNDS
        show("one ask, no terminal: fsyncs by where they came from", counters, ROUNDS)
        revision1 = daemon.durable.teams["bench"].revision
        per["team revisions per ask"] = (revision1 - revision0) / ROUNDS
        counters.counts.clear()
        counters.counting = True
        for n in range(ROUNDS):
            await bench.call("reply", "bench", key=bob, questionId=f"q{n}", text="8080")
            await until(lambda: delivery(daemon, "bench", f"q{n}", answered=True) is not None)  # noqa: B023
            await trio.sleep(0.2)
        counters.counting = False
        per["fsyncs per reply (request to continuation report)"] = counters.total() / ROUNDS
        show("one reply, no terminal: fsyncs by where they came from", counters, ROUNDS)
        per["team revisions per reply"] = (daemon.durable.teams["bench"].revision - revision1) / ROUNDS
        counters.counts.clear()
        daemon.stop()
    return per


async def with_terminal(home: Path, counters: Counters, trace_sync_ms: int | None) -> dict[str, float]:
    """fsyncs of one ask end to end, until the owner's view says its notice was accepted by the agent."""
    socket = f"harness-bench-{os.getpid()}-{secrets.token_hex(4)}"
    control, log = home.parent / "control", home.parent / "tui.jsonl"
    os.mkfifo(control)
    tui = [sys.executable, str(FAKE_TUI), "--control", str(control), "--log", str(log)]
    made: list[TmuxTerminals] = []

    def terminals(registry: AgentRegistry) -> TmuxTerminals:
        made.append(TmuxTerminals.from_registry(registry))
        return made[-1]

    per: dict[str, float] = {}
    try:
        pane = await new_session(socket, "bob", tui, width=100, height=30, config="/dev/null")
        timing = RunnerTiming(poll_ms=50)
        daemon = daemon_of(home, trace_sync_ms, terminals=terminals, runner_timing=timing)
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.run)
            bench = Bench(daemon)
            tmux = {"socket": socket, "target": pane}
            await bench.call("agent_register", agentId="agent-bob", name="bob", engine="claude", tmux=tmux)
            alice, _ = await bench.team("wired")
            await until(lambda: introduction(daemon, "wired", "bob") == "accepted")
            await trio.sleep(1.0)  # the engine's turn on the introduction ends before counting
            for n in range(ROUNDS // 4):
                counters.counts.clear()
                counters.counting = True
                await bench.call("ask", "wired", key=alice, id=f"w{n}", to="bob", text="Which port?")
                await until(lambda: delivery(daemon, "wired", f"w{n}") == "accepted")  # noqa: B023
                counters.counting = False
                await trio.sleep(1.0)  # the turn on it ends; the next ask starts from an idle agent
            # The trace's group fsync comes a second after its lines were written; nothing waits on it.
            waited = sum(n for where, n in counters.counts.items() if not where.startswith("team trace"))
            per["fsyncs on one ask's path to accepted, waited on"] = waited
            per["  the same with the trace's group fsync (nothing waits on it)"] = counters.total()
            show("the last ask with a terminal: fsyncs by where they came from", counters, 1)
            daemon.stop()
    finally:
        for made_terminals in made:
            await made_terminals.aclose()
        await kill_server(socket)
    return per


def introduction(daemon: Daemon, team: str, name: str) -> str | None:
    view = next(m.introduction for m in daemon.durable.teams[team].members.values() if m.name == name)
    return None if view is None else view.state


async def throughput(home: Path, counters: Counters, trace_sync_ms: int | None) -> dict[str, float]:
    """Durable asks/s with CLIENTS clients in a process of their own, and the event loop's CPU per ask."""
    daemon = daemon_of(home, trace_sync_ms, limits=BURST)
    per: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        bench = Bench(daemon)
        askers = tuple(f"asker{n}" for n in range(CLIENTS))
        keys = await bench.team("burst", (*askers, "bob"))
        argv = [sys.executable, str(Path(__file__).resolve()), "--clients", str(daemon.socket_path)]
        child = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdin is not None and child.stdout is not None
        await child.stdin.send_all(json.dumps(keys[:-1]).encode() + b"\n")  # never on a command line
        lines = LineReader(child.stdout)
        assert await lines.next() == "ready"
        counters.detailed, counters.counting = False, True
        steps = TaskSteps()
        trio.lowlevel.add_instrument(steps)
        cpu, started = time.thread_time(), time.perf_counter()
        await child.stdin.send_all(b"go\n")
        asked = int(await lines.next())
        elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu
        trio.lowlevel.remove_instrument(steps)
        counters.counting = False
        await child.wait()
        durable = len(daemon.durable.teams["burst"].exchanges)
        assert durable == asked == CLIENTS * ASKS_PER_CLIENT, (durable, asked)
        per[f"durable asks/s, {CLIENTS} clients"] = asked / elapsed
        per["event-loop CPU per ask (ms)"] = cpu / asked * 1000
        per["event-loop task steps per ask (a count: CPU without the noise)"] = steps.steps / asked
        per["tasks spawned per ask"] = steps.spawned / asked
        per[f"fsyncs per ask, {CLIENTS} clients (no terminal)"] = counters.total() / asked
        daemon.stop()
    return per


class TaskSteps(trio.abc.Instrument):
    """How often trio ran a task (one step: from a resume to its next yield) and how many it started."""

    def __init__(self) -> None:
        self.steps = self.spawned = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


class LineReader:
    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream, self.buffer = stream, b""

    async def next(self) -> str:
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some()
            if not chunk:
                raise EOFError("the client process ended")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


def clients(socket: Path) -> None:
    """The client process of `throughput`: one connection and thread per asker, asking as fast as answered.
    The askers' keys come on stdin, then `go`."""
    keys = [str(key) for key in json.loads(sys.stdin.readline())]
    connections = [Client(socket) for _ in keys]
    for connection in connections:
        connection.connect()
    print("ready", flush=True)
    sys.stdin.readline()

    def ask(connection: Client, asker: int, key: str) -> None:
        for n in range(ASKS_PER_CLIENT):
            fields = {"id": f"b{asker}-{n}", "to": "bob", "text": "Which port?"}
            connection.request("ask", team_id="burst", member_key=key, fields=fields)

    threads = [
        threading.Thread(target=ask, args=(connection, asker, key))
        for asker, (connection, key) in enumerate(zip(connections, keys, strict=True))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(len(keys) * ASKS_PER_CLIENT, flush=True)


def bare_appends_per_second(directory: Path) -> float:
    """The baseline: one write + fsync of an ask's journal record, one after another, on the same disk."""
    ask = {"type": "ask", "id": "q0", "to": "bob", "text": "Which port?"}
    record = encode_record("entry", 1, ask) + b"\n"
    fd = os.open(directory / "bare.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(BARE_APPENDS):
            os.write(fd, record)
            os.fsync(fd)
        return BARE_APPENDS / (time.perf_counter() - started)
    finally:
        os.close(fd)


def show(title: str, counters: Counters, rounds: int) -> None:
    print(f"  {title} (per round):")
    for what, count in sorted(counters.counts.items()):
        print(f"    {count / rounds:5.2f}  {what}")


def measure(root: Path, trace_sync_ms: int | None) -> dict[str, float]:
    figures: dict[str, float] = {}
    for name, run in (("idle", no_terminal), ("wired", with_terminal), ("burst", throughput)):
        home = root / name / "home"
        home.parent.mkdir(parents=True)
        counters = Counters(home)
        counters.install()
        try:
            figures.update(trio.run(run, home, counters, trace_sync_ms))
        finally:
            counters.uninstall()
    return figures


def main() -> None:
    if sys.argv[1:2] == ["--clients"]:
        clients(Path(sys.argv[2]))
        return
    # (column title, the team traces' fsync delay): the baseline fsyncs every trace write at once.
    policies: list[tuple[str, int | None]] = [("", None)]
    if "--baseline" in sys.argv:
        policies = [("trace fsynced per write", 0), ("trace rides", None)]
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for title, trace_sync_ms in policies:
            print(f"cost of one ask ({ROUNDS} rounds without a terminal; counts, not times) {title}:")
            runs.append(measure(root / str(len(runs)), trace_sync_ms))
        bare = bare_appends_per_second(root)
    print(f"  {'':62s} " + " ".join(f"{title or 'figure':>24s}" for title, _ in policies))
    for name in runs[0]:
        print(f"  {name:62s} " + " ".join(f"{figures[name]:24.2f}" for figures in runs))
    print(f"  {'bare fsynced appends/s of an ask record (baseline)':62s} {bare:24.2f}")
    asks = [figures[f"durable asks/s, {CLIENTS} clients"] / bare for figures in runs]
    print(f"  {'ratio: durable asks/s / bare fsynced appends/s':62s} " + " ".join(f"{r:24.2f}" for r in asks))
    per_ask = [figures["fsyncs per ask (request to report recorded)"] for figures in runs]
    title = "ratio: fsyncs per ask / the one durable append an ask needs"
    print(f"  {title:62s} " + " ".join(f"{r:24.2f}" for r in per_ask))


if __name__ == "__main__":
    main()
