# Measures what crossing machines costs, in one run (`--quick`: fewer samples, a smoke run):
#  1. a sealed `team` round trip between two RemoteNodes through a real relay on loopback against a plain
#     trio-websocket echo of a frame of the same size; seal and open cost per frame on their own;
#  2. ask -> notice latency between two real daemons (separate data directories, paired through the relay)
#     against the same ask to a member on the owner's own machine, with a stage breakdown of both paths;
#  3. frames per second through the relay, one sender streaming to one receiver under a credit window:
#     raw blobs against frames sealed with SendSession.seal and opened with ReceiveSession.open;
#  4. a member's read-only `harness team ... --machine OWNER` call, a cold CLI process on the paired machine,
#     against the same call made on the owner's machine to its own daemon, with what each path imports.
# Everything but section 4's CLI processes runs in this one process and one trio thread (relay, daemons,
# clients), on 127.0.0.1: the figures are software cost with no network latency, and each is printed against a
# baseline of the same run.
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio
from bench_support import children_cpu, echo, open_local_websocket, quantile
from trio_websocket import (
    WebSocketConnection,
    open_websocket_url,
    serve_websocket,
)

from harness.core import delivery as d
from harness.core.effects import notice_id
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import NoticeKind
from harness.io import home as homes
from harness.io import pairing
from harness.io.client import Client
from harness.io.daemon import Daemon
from harness.io.desk_runner import DeskRunner
from harness.io.relay import DROPPED, Notice, Relay, connect_relay
from harness.io.remote import RemoteNode, Reporter, TeamAnswer
from harness.io.remote_client import call_remote
from harness.io.rpc import RESULT_TYPE, request_frame, result_frame
from harness.io.seal import DEFAULT_BLOCK, Identity, ReceiveSession, SendSession
from harness.io.team_delivery import DeliveryReport, OwnerRequest

FRAME = '{"type":"team","requestId":"r","action":"inbox","teamId":"t","pad":"' + "x" * 900 + '"}'
TEAM_ID = "benchteam00000000000000000000042"
QUESTION = "Which endpoint returns the daemon's state, and where is it served? " * 3
# Ask bounds raised so that hundreds of asks fit in one minute (the defaults allow 30 and 8 open per sender);
# no cost path changes, the bounds only stop refusing.
BENCH_LIMITS = attrs.evolve(
    DEFAULT_LIMITS,
    asks_per_minute=100_000,
    pending_per_sender=100_000,
    exchanges=100_000,
    queued_per_agent=100_000,
    delivery_records=100_000,
)
STREAM_BYTES = 1024
WINDOW = 32  # frames in flight, sender to receiver: half the relay's per-connection queue (64)
ACK_EVERY = 8  # the receiver returns credit every this many frames


@attrs.frozen
class Sizes:
    round_trips: int
    seal_frames: int
    notice_samples: int
    notice_warmup: int
    stream_frames: int  # timed
    stream_warm: int
    cli_samples: int  # cold CLI processes per path


FULL = Sizes(
    round_trips=500,
    seal_frames=5000,
    notice_samples=200,
    notice_warmup=20,
    stream_frames=5000,
    stream_warm=500,
    cli_samples=30,
)
QUICK = Sizes(
    round_trips=50,
    seal_frames=500,
    notice_samples=20,
    notice_warmup=3,
    stream_frames=500,
    stream_warm=100,
    cli_samples=6,
)


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def percentiles(samples: list[float], upper: int = 99, digits: int = 3) -> str:
    """The median and an upper percentile in ms: p99 of sub-millisecond latencies, p90 of process starts."""
    high = quantile(samples, upper / 100)
    return f"p50 {p50(samples) * 1000:7.{digits}f} ms  p{upper} {high * 1000:7.{digits}f} ms"


def quiet(line: str) -> None:
    pass


# --- 1. the existing measurements: sealed request/response and seal/open per frame --------------------------


async def echo_round_trips(count: int) -> list[float]:
    samples = []
    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_websocket, echo, "127.0.0.1", 0, None))
        async with open_websocket_url(f"ws://127.0.0.1:{server.port}") as ws:
            for _ in range(count):
                start = time.perf_counter()
                await ws.send_message(FRAME)
                await ws.get_message()
                samples.append(time.perf_counter() - start)
        nursery.cancel_scope.cancel()
    return samples


async def sealed_round_trips(tmp: Path, count: int) -> list[float]:
    async def handle(message: str, origin: str) -> TeamAnswer:
        return TeamAnswer(result_frame("r", {"echo": len(message)}))

    samples = []
    async with trio.open_nursery() as nursery:
        relay = Relay()
        url = f"ws://127.0.0.1:{await nursery.start(relay.serve, 0)}"
        node_a = RemoteNode(tmp / "a", relay_url=url, log=quiet)
        await nursery.start(node_a.run, handle)
        await node_a.wait_connected()
        await pairing.accept_code(tmp / "b", pairing.create_code(tmp / "a", url).text())
        node_b = RemoteNode(tmp / "b", log=quiet)
        await nursery.start(node_b.run)
        await node_b.wait_connected()
        for _ in range(count):
            start = time.perf_counter()
            await node_b.request(node_a.machine_id, {"ch": "team", "frame": FRAME})
            samples.append(time.perf_counter() - start)
        nursery.cancel_scope.cancel()
    return samples


def seal_costs(tmp: Path, count: int) -> tuple[float, float]:
    a, b = Identity.generate(), Identity.generate()
    sender = SendSession(tmp / "s.json", a, b.public)
    receiver = ReceiveSession(tmp / "r.json", b, a.public)
    body = FRAME.encode()
    start = time.perf_counter()
    frames = [sender.seal(body) for _ in range(count)]
    sealed = (time.perf_counter() - start) / count
    start = time.perf_counter()
    for frame in frames:
        receiver.open(frame)
    opened = (time.perf_counter() - start) / count
    return sealed, opened


# --- 2. ask -> notice through two real daemons --------------------------------------------------------------

# Timeline marks of one ask (perf_counter seconds), set by hooks on the objects the notice passes through.
SENT = "sent"  # the asker's client is about to send the ask frame
ENQUEUED = "enqueued"  # A's remote node took the Submit into machine B's outbox (cross-machine only)
RELAY_IN = "relay_in"  # the relay read A's sealed frame for B
RELAY_OUT = "relay_out"  # the relay finished writing it to B's connection
AT_DESK = "at_desk"  # the destination desk's submit() was entered with the Submit
DURABLE = "durable"  # the destination desk journaled (fsync) the Submit and holds the notice
REPLIED = "replied"  # the asker's client has the ask's reply (the owner's ledger change is durable)
REPORTED = "reported"  # the owner's daemon received the destination's first delivery report of it


@attrs.define
class Probe:
    """The one ask being timed; hooks mark its timeline."""

    notice: str | None = None
    marks: dict[str, float] = attrs.Factory(dict)
    durable: trio.Event = attrs.Factory(trio.Event)
    reported: trio.Event = attrs.Factory(trio.Event)

    def start(self, notice: str) -> None:
        self.notice, self.marks = notice, {}
        self.durable, self.reported = trio.Event(), trio.Event()

    def mark(self, name: str) -> None:
        if self.notice is not None and name not in self.marks:
            self.marks[name] = time.perf_counter()


def hook_desk(desk: DeskRunner, probe: Probe) -> None:
    """Marks AT_DESK when the desk's submit() or requests() (a batch of owner requests) is entered with the
    probed notice, and DURABLE when `apply_all`, having journaled it (the append returns once fsynced) and
    adopted the new desk state, starts acting on its effects. A hook on the desk's own code path: no
    polling."""
    submit, requests, act = desk.submit, desk.requests, desk._act

    async def hooked_submit(command: d.Submit) -> None:
        if command.notice_id == probe.notice:
            probe.mark(AT_DESK)
        await submit(command)

    async def hooked_requests(commands: Sequence[OwnerRequest]) -> None:
        if any(isinstance(c, d.Submit) and c.notice_id == probe.notice for c in commands):
            probe.mark(AT_DESK)
        await requests(commands)

    async def hooked_act(effects: Any) -> None:
        if probe.notice is not None and DURABLE not in probe.marks and probe.notice in desk.desk.notices:
            probe.mark(DURABLE)
            probe.durable.set()
        await act(effects)

    desk.submit = hooked_submit  # type: ignore[method-assign]
    desk.requests = hooked_requests  # type: ignore[method-assign]
    desk._act = hooked_act  # type: ignore[method-assign]


def hook_owner(node: RemoteNode, probe: Probe) -> None:
    """Marks ENQUEUED (the Submit entered B's outbox) and REPORTED (a destination's report reached the owner's
    daemon, local desk or remote alike, before the owner's ledger records it: a paired desk's report comes
    through `report_local`, the owner's own desk's through `report_own`, where it rides)."""
    enqueue = node.enqueue

    def hooked_enqueue(machine: str, body: dict[str, Any], notice: d.Submit | None = None) -> None:
        if notice is not None and notice.notice_id == probe.notice:
            probe.mark(ENQUEUED)
        enqueue(machine, body, notice)

    def hooked(report_to: Reporter) -> Reporter:
        async def hooked_report(report: DeliveryReport) -> None:
            if report.notice_id == probe.notice:
                probe.mark(REPORTED)
                probe.reported.set()
            await report_to(report)

        return hooked_report

    assert node.report_local is not None
    node.enqueue = hooked_enqueue  # type: ignore[method-assign]
    node.report_local = hooked(node.report_local)
    if node.report_own is not None:
        node.report_own = hooked(node.report_own)


def relay_observer(probe: Probe, addresses: dict[str, str]) -> Callable[[str, str], None]:
    """The relay's observe hook: marks the first frame A sends B after ENQUEUED, in and out of the relay."""

    def observe(direction: str, message: str) -> None:
        if ENQUEUED not in probe.marks or not addresses:
            return
        if direction == "in" and message.startswith(addresses["to_b"]):
            probe.mark(RELAY_IN)
        elif direction == "out" and RELAY_IN in probe.marks and message.startswith(addresses["from_a"]):
            probe.mark(RELAY_OUT)

    return observe


class TeamConnection:
    """The asker's client: one loopback WebSocket speaking the `team` RPC to the owner's daemon (async, in the
    daemons' trio run, so no thread hop or GIL hand-off sits inside the timed interval)."""

    def __init__(self, ws: WebSocketConnection, token: str | None) -> None:
        self.ws = ws
        self.token = token

    def frame(self, action: str, key: str | None = None, team: str | None = TEAM_ID, **fields: Any) -> str:
        token = None if key else self.token
        rid = secrets.token_hex(6)
        return request_frame(rid, action, team_id=team, member_key=key, owner_token=token, fields=fields)

    async def exchange(self, frame: str) -> Any:
        await self.ws.send_message(frame)
        reply = json.loads(await self.ws.get_message())
        if reply.get("type") != RESULT_TYPE:
            raise RuntimeError(f"the daemon refused: {reply}")
        return reply["result"]

    async def call(
        self, action: str, key: str | None = None, team: str | None = TEAM_ID, **fields: Any
    ) -> Any:
        return await self.exchange(self.frame(action, key, team, **fields))


def fast_node(home: Path) -> RemoteNode:
    return RemoteNode(home, retry_min=0.05, retry_max=0.2, log=quiet)


@attrs.define
class NoticeRun:
    local: list[dict[str, float]] = attrs.Factory(list)
    remote: list[dict[str, float]] = attrs.Factory(list)
    internal_errors: int = 0


@asynccontextmanager
async def two_daemons(tmp: Path, observe: Callable[[str, str], None]) -> AsyncIterator[tuple[Daemon, Daemon]]:
    """A real relay and two daemons with their own data directories, paired as `harness pair` pairs them."""
    async with trio.open_nursery() as nursery:
        relay = Relay(observe=observe)
        url = f"ws://127.0.0.1:{await nursery.start(relay.serve, 0)}"
        a = Daemon(tmp / "a", limits=BENCH_LIMITS, remote=fast_node, log=quiet)
        b = Daemon(tmp / "b", limits=BENCH_LIMITS, remote=fast_node, log=quiet)
        async with trio.open_nursery() as daemons:
            await daemons.start(a.run)
            await daemons.start(b.run)
            assert a.node is not None and b.node is not None
            code = pairing.create_code(a.home, url)
            await a.node.wait_connected()
            await pairing.accept_code(b.home, code.text())
            await b.node.wait_connected()
            try:
                yield a, b
            finally:
                a.stop()
                b.stop()
        nursery.cancel_scope.cancel()


async def ask_to_notice(tmp: Path, sizes: Sizes) -> NoticeRun:
    probe = Probe()
    addresses: dict[str, str] = {}
    run = NoticeRun()
    async with two_daemons(tmp, relay_observer(probe, addresses)) as (a, b):
        assert a.node is not None and b.node is not None and a.desk is not None and b.desk is not None
        addresses["to_b"] = '{"to":"' + b.node.identity.address + '"'
        addresses["from_a"] = '{"from":"' + a.node.identity.address + '"'
        members = [
            {"machineId": a.machine_id, "agentId": "agent-alice", "name": "alice"},
            {"machineId": a.machine_id, "agentId": "agent-carol", "name": "carol"},  # local addressee
            {"machineId": b.machine_id, "agentId": "agent-bob", "name": "bob"},  # on machine B
        ]
        hook_desk(a.desk, probe)
        hook_desk(b.desk, probe)
        hook_owner(a.node, probe)
        async with open_local_websocket(a.socket_path) as ws:
            client = TeamConnection(ws, homes.read_owner_token(a.home))
            await client.call("create", team=None, id=TEAM_ID, name="bench", members=members)
            alice = (await client.call("key", memberId="alice"))["memberKey"]

            async def one(index: int, to: str) -> dict[str, float]:
                question = f"q{index}-{to}"
                frame = client.frame("ask", alice, id=question, to=to, text=QUESTION)
                with trio.fail_after(10):
                    probe.start(notice_id(TEAM_ID, question, NoticeKind.QUESTION))
                    probe.mark(SENT)
                    await client.exchange(frame)
                    probe.mark(REPLIED)
                    await probe.durable.wait()
                    await probe.reported.wait()
                    # Settle before the next ask: the owner's ledger has recorded the report and the trailing
                    # responses (B's to the Submit, A's to the report) have crossed the relay.
                    team = a.durable.teams[TEAM_ID]
                    while team.exchanges[question].delivery is None:
                        await trio.sleep(0.001)
                        team = a.durable.teams[TEAM_ID]
                    await trio.sleep(0.005)
                marks, probe.notice = probe.marks, None
                return marks

            for index in range(sizes.notice_warmup + sizes.notice_samples):
                # Interleaved, alternating which goes first, so both see the same ledger size and noise.
                pair = [("carol", run.local), ("bob", run.remote)]
                for to, into in pair if index % 2 else pair[::-1]:
                    marks = await one(index, to)
                    if index >= sizes.notice_warmup:
                        into.append(marks)
    run.internal_errors = a.internal_errors + b.internal_errors
    return run


def span(runs: list[dict[str, float]], start: str, end: str) -> list[float]:
    return [marks[end] - marks[start] for marks in runs]


def print_notices(run: NoticeRun, sizes: Sizes) -> None:
    local, remote = span(run.local, SENT, DURABLE), span(run.remote, SENT, DURABLE)
    print(f"  {sizes.notice_samples} samples each after {sizes.notice_warmup} warm-up pairs, interleaved")
    print(f"  same machine (addressee's desk is A's own):   {percentiles(local)}")
    print(f"  cross machine (A -> relay -> B's desk):       {percentiles(remote)}")
    print(
        f"  ratio cross/same:  p50 {p50(remote) / p50(local):.2f}x  "
        f"p99 {quantile(remote, 0.99) / quantile(local, 0.99):.2f}x"
    )
    reply_l, reply_r = span(run.local, SENT, REPLIED), span(run.remote, SENT, REPLIED)
    report_l, report_r = span(run.local, SENT, REPORTED), span(run.remote, SENT, REPORTED)
    print(f"  ask reply at the client, same machine:        {percentiles(reply_l)}")
    print(f"  ask reply at the client, cross machine:       {percentiles(reply_r)}")
    print(f"  owner hears the desk's first report, same:    {percentiles(report_l)}")
    print(f"  owner hears the desk's first report, cross:   {percentiles(report_r)}  (B -> relay -> A)")
    print("  where the time goes (p50 of each stage, ms; stages add up to about the p50 above):")
    stages = [
        ("A: ask parsed, ledger step + journal fsync, finisher, worker -> local desk.submit", SENT, AT_DESK),
        ("A's desk: step + journal append (fsync) -> durable", AT_DESK, DURABLE),
    ]
    for label, start, end in stages:
        print(f"    same  {label:<88} {p50(span(run.local, start, end)) * 1000:7.3f}")
    stages = [
        ("A: ask parsed, ledger step + journal fsync, finisher, worker -> B's outbox", SENT, ENQUEUED),
        ("A: outbox worker wakes, seals, websocket send -> relay has read the frame", ENQUEUED, RELAY_IN),
        ("relay: route, queue, websocket write to B's connection", RELAY_IN, RELAY_OUT),
        ("B: read, open (fdatasync of the replay mark), dispatch -> B's desk.submit", RELAY_OUT, AT_DESK),
        ("B's desk: step + journal append (fsync) -> durable", AT_DESK, DURABLE),
    ]
    for label, start, end in stages:
        print(f"    cross {label:<88} {p50(span(run.remote, start, end)) * 1000:7.3f}")
    early = sum(marks[REPLIED] < marks[RELAY_IN] for marks in run.remote)
    print(f"  note: in {early} of {len(run.remote)} cross samples the asker had its reply before A's frame")
    print("  reached the relay: A answering the ask (and this in-process client reading it) falls inside")
    print("  the outbox -> relay stage, ahead of the outbox worker on the one trio thread.")
    if run.internal_errors:
        print(f"  WARNING: the daemons counted {run.internal_errors} internal errors")


# --- 3. frames per second through the relay -----------------------------------------------------------------


@attrs.define
class Stream:
    frames: int  # sent, the warm-up included
    warm: int  # frames handled before the clock starts (connections, sessions and caches warm up)
    received: int = 0
    dropped: int = 0  # frames the relay dropped (its queue for the receiver was full)
    started: float = 0.0
    seconds: float = 0.0
    seals: list[float] = attrs.Factory(list)  # seconds per SendSession.seal call (sealed runs)
    opens: list[float] = attrs.Factory(list)  # seconds per ReceiveSession.open call (sealed runs)

    @property
    def rate(self) -> float:
        return (self.received - self.warm) / self.seconds


async def stream(tmp: Path, frames: int, warm: int, sealed: bool) -> Stream:
    """One sender streams `frames` blobs of STREAM_BYTES to one receiver through the relay, at most WINDOW
    unacknowledged; the receiver returns credit every ACK_EVERY frames. Timed from the receiver handling
    frame `warm` to its handling the last one. Sealed: seal before each send, open (durable mark) on each
    receipt."""
    payload = os.urandom(STREAM_BYTES)
    alice, bob = Identity.generate(), Identity.generate()
    tag = "sealed" if sealed else "raw"
    sender = SendSession(tmp / f"{tag}-send.json", alice, bob.public)
    receiver = ReceiveSession(tmp / f"{tag}-mark", bob, alice.public)
    result = Stream(frames, warm)
    acked = 0
    credit = trio.Event()
    done = trio.Event()

    def finished() -> None:
        if result.received + result.dropped >= frames:
            result.seconds = time.perf_counter() - result.started
            done.set()

    relay = Relay()
    async with trio.open_nursery() as outer:
        url = f"ws://127.0.0.1:{await outer.start(relay.serve, 0)}"
        async with connect_relay(url, alice) as tx, connect_relay(url, bob) as rx:

            async def credits() -> None:
                nonlocal acked
                while True:
                    event = await tx.receive()
                    if isinstance(event, Notice):
                        if event.kind == DROPPED:
                            result.dropped += 1
                            finished()
                        continue
                    acked = int.from_bytes(event.blob, "big")
                    credit.set()

            async def receive() -> None:
                while True:
                    event = await rx.receive()
                    if isinstance(event, Notice):
                        continue
                    body = event.blob
                    if sealed:
                        began = time.perf_counter()
                        body = receiver.open(body)
                        result.opens.append(time.perf_counter() - began)
                    assert len(body) == STREAM_BYTES
                    result.received += 1
                    if result.received == warm:
                        result.started = time.perf_counter()
                    if result.received % ACK_EVERY == 0:
                        await rx.send(alice.address, result.received.to_bytes(8, "big"))
                    finished()

            async with trio.open_nursery() as inner:
                inner.start_soon(credits)
                inner.start_soon(receive)
                with trio.fail_after(60):
                    for sent in range(frames):
                        while sent - acked - result.dropped >= WINDOW:
                            credit = trio.Event()
                            await credit.wait()
                        blob = payload
                        if sealed:
                            began = time.perf_counter()
                            blob = sender.seal(payload)
                            result.seals.append(time.perf_counter() - began)
                        await tx.send(bob.address, blob)
                    await done.wait()
                inner.cancel_scope.cancel()
        outer.cancel_scope.cancel()
    result.dropped = max(result.dropped, relay.stats["dropped"])  # the notices, or the relay's own count
    return result


def print_stream(raw: Stream, sealed: Stream) -> None:
    for label, result in (("raw blobs (no sealing)", raw), ("sealed + opened", sealed)):
        drops = "no drops" if result.dropped == 0 else f"{result.dropped} DROPPED: the rate is not comparable"
        print(
            f"  {label:<24} {result.rate:7.0f} frames/s  ({result.received - result.warm} timed frames after "
            f"{result.warm} warm-up, {result.seconds:.2f} s; {drops})"
        )
    print(f"  ratio sealed/unsealed:   {sealed.rate / raw.rate:.2f}x")
    opens, seals = sealed.opens[sealed.warm :], sealed.seals[sealed.warm :]
    print(
        f"  of the sealed run's {sealed.seconds:.2f} s: ReceiveSession.open {sum(opens):.2f} s (p50 "
        f"{p50(opens) * 1e6:.0f} us, p99 {quantile(opens, 0.99) * 1e6:.0f} us per frame; mostly its "
        "fdatasync),\n"
        f"  SendSession.seal {sum(seals):.2f} s (p50 {p50(seals) * 1e6:.0f} us per frame)"
    )


# --- 4. a `--machine` CLI call against the same call locally ----------------------------------------------

HARNESS_CLI = Path(sys.executable).with_name("harness")  # this environment's console script: what a user runs
IMPORT_LINE = re.compile(r"import time:\s*(\d+) \|\s*(\d+) \|( *)(\S+)")


@attrs.define
class Imports:
    """What `python -X importtime` says a process imported: module -> its own and cumulative microseconds,
    and the module whose import first imported it (None: the interpreter's startup or the script)."""

    own: dict[str, int] = attrs.Factory(dict)
    cumulative: dict[str, int] = attrs.Factory(dict)
    parent: dict[str, str | None] = attrs.Factory(dict)

    @property
    def total(self) -> float:
        return sum(self.own.values()) / 1e6

    def top(self, names: set[str], count: int) -> list[tuple[str, int]]:
        """The `count` costliest of `names` by cumulative time, counting each import tree once: only the
        modules whose importer is not itself in `names`."""
        outer = [name for name in names if self.parent[name] not in names]
        return sorted(((name, self.cumulative[name]) for name in outer), key=lambda item: -item[1])[:count]


@attrs.define
class CliRun:
    bare: list[float] = attrs.Factory(list)  # wall seconds of `python -c pass`
    local: list[float] = attrs.Factory(list)  # wall seconds of the whole process
    machine: list[float] = attrs.Factory(list)
    local_cpu: list[float] = attrs.Factory(list)  # user + system seconds of the process
    machine_cpu: list[float] = attrs.Factory(list)
    local_call: list[float] = attrs.Factory(list)  # the request alone, in a warm thread of this process
    machine_call: list[float] = attrs.Factory(list)
    imports: dict[str, list[Imports]] = attrs.Factory(dict)


def cli_env(home: Path) -> dict[str, str]:
    return {**os.environ, homes.HOME_ENV: str(home)}


async def cli_process(argv: list[str], home: Path) -> tuple[float, float, bytes, bytes]:
    """One cold `harness` process with HARNESS_HOME=`home`: wall and CPU seconds, stdout, stderr."""
    before, start = children_cpu(), time.perf_counter()
    done = await trio.run_process(
        argv, env=cli_env(home), capture_stdout=True, capture_stderr=True, check=False
    )
    wall, cpu = time.perf_counter() - start, children_cpu() - before
    if done.returncode != 0:
        raise RuntimeError(f"{argv[1:]} exited {done.returncode}: {done.stdout!r} {done.stderr!r}")
    return wall, cpu, done.stdout, done.stderr


def parse_imports(stderr: bytes) -> Imports:
    """-X importtime lists a module after the ones its import brought in, indented one step less."""
    found = Imports()
    waiting: dict[int, list[str]] = collections.defaultdict(list)  # depth -> modules without an importer yet
    for match in IMPORT_LINE.finditer(stderr.decode()):
        own, cumulative, indent, name = match.groups()
        depth = len(indent) // 2
        found.own[name], found.cumulative[name], found.parent[name] = int(own), int(cumulative), None
        for child in waiting.pop(depth + 1, []):
            found.parent[child] = name
        waiting[depth].append(name)
    return found


async def machine_calls(tmp: Path, sizes: Sizes) -> CliRun:
    """`harness team --team T --key-file K members --json` by a member whose agent is on machine B: on A (the
    owner, its own daemon) and on B with `--machine A` (B's gateway -> relay -> A), as cold processes,
    interleaved; then the same requests made in a warm thread of this process, and each path's imports."""
    run = CliRun()
    async with two_daemons(tmp, lambda direction, message: None) as (a, b):
        members = [
            {"machineId": a.machine_id, "agentId": "agent-alice", "name": "alice"},
            {"machineId": b.machine_id, "agentId": "agent-bob", "name": "bob"},
        ]
        async with open_local_websocket(a.socket_path) as ws:
            owner = TeamConnection(ws, homes.read_owner_token(a.home))
            await owner.call("create", team=None, id=TEAM_ID, name="bench", members=members)
            key = str((await owner.call("key", memberId="bob"))["memberKey"])
        key_file = tmp / "bob.key"
        key_file.write_text(key + "\n")
        call = ["team", "--team", TEAM_ID, "--key-file", str(key_file), "members", "--json"]
        paths = {
            "local": ([str(HARNESS_CLI), *call], a.home),
            "machine": ([str(HARNESS_CLI), *call, "--machine", a.machine_id], b.home),
        }
        answers = {}
        for name, (argv, home) in paths.items():  # warm-up, and both paths must answer alike
            answers[name] = json.loads((await cli_process(argv, home))[2])
        if answers["local"] != answers["machine"]:
            raise RuntimeError(f"the two paths answered differently: {answers}")
        for index in range(sizes.cli_samples):
            order = list(paths.items())
            for name, (argv, home) in order if index % 2 else order[::-1]:
                wall, cpu, _, _ = await cli_process(argv, home)
                getattr(run, name).append(wall)
                getattr(run, f"{name}_cpu").append(cpu)
            run.bare.append((await cli_process([sys.executable, "-c", "pass"], tmp))[0])
        for name, (argv, home) in paths.items():
            run.imports[name] = [
                parse_imports((await cli_process([sys.executable, "-X", "importtime", *argv], home))[3])
                for _ in range(3)
            ]

        def local_call() -> Any:
            with Client(a.socket_path) as client:
                return client.request("members", team_id=TEAM_ID, member_key=key)

        def machine_call() -> Any:
            return call_remote(b.home, a.machine_id, "members", team_id=TEAM_ID, member_key=key)

        calls = [(run.local_call, local_call), (run.machine_call, machine_call)]
        for index in range(sizes.cli_samples * 4):
            for into, request in calls if index % 2 else calls[::-1]:
                start = time.perf_counter()
                await trio.to_thread.run_sync(request)
                into.append(time.perf_counter() - start)
    return run


def processes(samples: list[float]) -> str:
    return percentiles(samples, upper=90, digits=1)


def print_machine(run: CliRun, sizes: Sizes) -> None:
    print(f"  {sizes.cli_samples} cold processes each after one warm-up, interleaved")
    print(f"  python -c pass (the interpreter alone):  wall {processes(run.bare)}")
    for name, wall, cpu in (
        ("local   (A's member call on A):", run.local, run.local_cpu),
        ("machine (--machine A, on B):   ", run.machine, run.machine_cpu),
    ):
        print(f"  {name}          wall {processes(wall)}   CPU {processes(cpu)}")
    print(
        f"  ratio machine/local:  wall p50 {p50(run.machine) / p50(run.local):.2f}x  "
        f"p90 {quantile(run.machine, 0.9) / quantile(run.local, 0.9):.2f}x   "
        f"CPU p50 {p50(run.machine_cpu) / p50(run.local_cpu):.2f}x   (goal <= 1.3x)"
    )
    print("  where the time goes:")
    print(f"    the request alone, in a warm thread, local:   {processes(run.local_call)}")
    print(f"    the request alone, in a warm thread, machine: {processes(run.machine_call)}")
    print(
        "      (machine: gateway socket, seal, relay, open with its fdatasync, A's daemon, and the same back)"
    )
    local, machine = run.imports["local"][0], run.imports["machine"][0]
    totals = {name: p50([found.total for found in runs]) * 1000 for name, runs in run.imports.items()}
    print(
        "    imports (-X importtime, own times summed, p50 of 3; the flag itself slows them): "
        f"local {len(local.own)} modules {totals['local']:.1f} ms,"
    )
    print(f"      machine {len(machine.own)} modules {totals['machine']:.1f} ms")
    extra = set(machine.own) - set(local.own)
    listed = ", ".join(f"{name} {us / 1000:.1f} ms" for name, us in machine.top(extra, 6)) or "none"
    print(f"    imported only on the machine path: {len(extra)} modules; costliest trees: {listed}")
    shared = ", ".join(f"{name} {us / 1000:.1f} ms" for name, us in local.top(set(local.own), 6))
    print(f"    costliest import trees of the local path (cumulative): {shared}")


# --- the run ------------------------------------------------------------------------------------------------

HEADER = """\
bench_relay: what crossing machines costs. Relay, daemons and clients all run in this one process and one
trio thread on 127.0.0.1 (real trio-websocket connections, real fsyncs in temporary data directories), so
the figures are software and disk cost without network latency; each is printed against a baseline of the
same run. p99 is the nearest-rank 99th percentile."""


def section(title: str, *lines: str) -> None:
    print(f"\n{title}")
    for line in lines:
        print(f"  # {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run: far fewer samples")
    sizes = QUICK if parser.parse_args().quick else FULL
    began = time.perf_counter()
    print(HEADER)
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        section(
            "1. sealed request/response through the relay",
            "From RemoteNode.request on B to its response: seal, relay hop, open (durable mark), A's",
            "handler, and back. Baseline: a plain loopback trio-websocket echo of a frame of the same size.",
        )
        echo = trio.run(echo_round_trips, sizes.round_trips)
        sealed = trio.run(sealed_round_trips, tmp / "rt", sizes.round_trips)
        seal, open_ = seal_costs(tmp, sizes.seal_frames)
        print(f"  frame: {len(FRAME)} bytes; {sizes.round_trips} round trips each")
        print(f"  plain loopback websocket echo:        {percentiles(echo)}")
        print(f"  sealed request/response via relay:    {percentiles(sealed)}")
        print(f"  ratio sealed/echo:  p50 {p50(sealed) / p50(echo):.1f}x")
        print(f"  seal per frame:  {seal * 1e6:6.1f} us (a durable reservation every {DEFAULT_BLOCK} frames)")
        print(f"  open per frame:  {open_ * 1e6:6.1f} us (with the durable high-water mark: one fdatasync)")

        section(
            "2. ask -> notice latency (two real Daemons, separate data directories, paired via the relay)",
            "From the asker's client sending the `ask` frame (owner A's loopback RPC, one open connection)",
            "until the addressee's delivery desk holds the notice durably: its Submit journaled (fsync) and",
            "adopted, seen by a hook on the desk's apply path (no polling). The agent has no terminal, so",
            "the notice then waits `queued`. Cross: the addressee's agent is on machine B (A's ledger ->",
            "sealed outbox -> relay -> B's desk). Baseline: the same ask to a member on A (A's own desk).",
            "Ask bounds are raised for the run (rate, open questions); each ask starts once the previous",
            "one's report is recorded by the owner and its trailing frames have crossed (+5 ms settle).",
        )
        notices = trio.run(ask_to_notice, tmp / "daemons", sizes)
        print_notices(notices, sizes)

        section(
            "3. frames per second through the relay, sealed against unsealed",
            f"One sender streams {STREAM_BYTES}-byte frames to one receiver through the relay, at most "
            f"{WINDOW} unacknowledged",
            f"(the relay queues 64 per connection for a receiver; the receiver returns credit every "
            f"{ACK_EVERY} frames).",
            f"Timed over {sizes.stream_frames} frames after {sizes.stream_warm} warm-up ones, until the "
            "receiver handled the last one.",
            f"Sealed: SendSession.seal (reserves counters durably every {DEFAULT_BLOCK} frames: "
            "DEFAULT_BLOCK, the sender's",
            "batching knob, left at its default) and ReceiveSession.open (one fdatasync of the high-water",
            "mark for every frame that advances it, before the body is handed on; it has no batching knob).",
        )
        frames = sizes.stream_warm + sizes.stream_frames
        raw = trio.run(stream, tmp, frames, sizes.stream_warm, False)
        sealed_stream = trio.run(stream, tmp, frames, sizes.stream_warm, True)
        print_stream(raw, sealed_stream)

        section(
            "4. a `--machine` CLI call against the same call locally (two real Daemons, as in 2)",
            "`harness team --team T --key-file K members --json` by member bob (agent on B), each a new",
            "process of this environment's console script with HARNESS_HOME set: on B with `--machine A`",
            "(B's gateway -> sealed over the relay -> A's daemon and back) against the same call on A to A's",
            "own daemon. The daemons run in this process's trio thread. CPU: the child's user + system time.",
        )
        print_machine(trio.run(machine_calls, tmp / "cli", sizes), sizes)
    print(f"\ntotal {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
