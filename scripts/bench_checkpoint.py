# Why: issue 18 measured a desk checkpoint at its bound (10,000 delivery records, ~5 MB) at 181 ms to encode
# and 312 ms to recover, paid every 256 desk appends, and a restart at the seed's bounds spending most of its
# time decoding teams' checkpoints; nothing repeated those figures. This builds both states through the pure
# reducers (a desk of 10,000 records, the mix of scripts/bench_delivery.py; a team of 450 answered exchanges,
# the mix of scripts/bench_core.py) and times, for each:
#
# - encode: `to_json` (the codec), then the whole checkpoint record the journal writes (`encode_record`);
# - decode: `from_json` of the parsed payload;
# - recover: what a daemon does at start with a store holding only that checkpoint: scan the directory
#   (read, checksum, parse) and replay (`replay_desk` of io/desk_runner.py, `replay` of io/ledger_runner.py);
# - loop stall: the longest a trio task sleeping 1 ms at a time waits beyond its 1 ms while a real store
#   (io/journal.py, fsync and all) writes the checkpoint, given the payload as a mapping made on the event
#   loop (as before issue 18; still the ledger's) or as a callable encoded in a worker thread (the desk's).
#
# - the desk in parts (io/desk_parts.py, what the daemon writes): the first checkpoint, which writes every
#   part, then one after the next 256 desk steps (the queued notices' heads written, accepted and read), which
#   writes only the parts that changed: the CPU of making its payload and parts, the bytes written, and the
#   whole checkpoint through a real store (fsyncs included); and recovery from the parts.
#
# Each figure is printed beside `json.dumps` / `json.loads` of the same document measured in the same run, and
# as a ratio to it: the machine is shared and noisy, ratios travel between runs and machines.
#
#     .venv/bin/python scripts/bench_checkpoint.py [--runs N]
from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import trio

from harness.core import commands as c
from harness.core import delivery as d
from harness.core.codec import from_json, to_json
from harness.core.errors import Rejected
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import EMPTY_LEDGER, NoticeKind, Team
from harness.core.team import step
from harness.io.desk_parts import DeskParts
from harness.io.desk_runner import replay_desk
from harness.io.fileops import FileOps
from harness.io.journal import JournalStore
from harness.io.journal_files import checkpoint_name, encode_record, scan_store
from harness.io.ledger_runner import replay

MACHINE = "bench"
AGENTS = [f"agent{n:02d}" for n in range(32)]
RECORDS = DEFAULT_LIMITS.delivery_records
TEAM = "bench"
MEMBERS = 32
EXCHANGES = 450
OPEN = 6  # exchanges left open, as a live team has
ASK_GAP_MS = 2_500  # keeps the team under 30 asks per rolling minute


def build_desk() -> d.Desk:
    """A desk at its bound: every agent's queue full, the rest written, accepted and read; a few held."""
    limits = DEFAULT_LIMITS
    desk = d.empty_desk(MACHINE)
    now = 1_000
    serial = 0

    def run(command: d.DeskCommand) -> None:
        nonlocal desk
        outcome = d.step(desk, command, limits)
        if isinstance(outcome, Rejected):
            raise SystemExit(f"bench stream refused {command!r}: {outcome}")
        desk = outcome.state

    def submit(agent: str) -> None:
        nonlocal serial
        serial += 1
        text = f"[team] Question q{serial} from someone: what is {serial}? " + "context " * 40
        notice = f"team/q{serial}/question"
        mem = f"mem-{agent}"
        run(
            d.Submit(
                now,
                "team",
                notice,
                NoticeKind.QUESTION,
                f"q{serial}",
                mem,
                MACHINE,
                agent,
                now + 86_400_000,
                text,
            )
        )

    for agent in AGENTS:
        for _ in range(limits.queued_per_agent):
            submit(agent)
    while len(desk.notices) < RECORDS:
        for agent in AGENTS:
            if len(desk.notices) >= RECORDS:
                break
            now += limits.write_settle_ms
            run(d.Observe(now, agent, d.Observed.BUSY))
            now += 1
            run(d.Observe(now, agent, d.Observed.IDLE))
            head = desk.sessions[agent].queue[0]
            now += 1
            run(d.WriteStarted(now, head, d.Observed.IDLE, now - 1))
            now += 1
            run(d.WriteFinished(now, head, d.WriteResult.OK))
            now += 1
            run(d.TurnObserved(now, head))
            now += 1
            run(d.InboxRead(now, (head,)))
            submit(agent)
        now += 1
        run(d.Tick(now))
    run(d.Observe(now, AGENTS[0], d.Observed.DRAFT))
    return desk


def build_team() -> Team:
    """A team of 32 members and 450 exchanges: asked, delivered, answered, its answer delivered; 6 open."""
    members = tuple(
        c.NewMember(f"m{n}", "machine", f"a{n}", f"agent-{n}", "role", f"key{n}") for n in range(MEMBERS)
    )
    ledger = EMPTY_LEDGER

    def run(command: c.TeamCommand) -> None:
        nonlocal ledger
        outcome = step(ledger, command)
        if isinstance(outcome, Rejected):
            raise SystemExit(f"bench command refused {command!r}: {outcome}")
        ledger = outcome.state

    run(c.CreateTeam(0, TEAM, "bench team", members))
    for n in range(MEMBERS):
        run(c.RecordDelivery(1, TEAM, f"{TEAM}/m{n}/introduction", "accepted"))
    now = 0
    for n in range(EXCHANGES):
        now += ASK_GAP_MS
        asker, addressee = n % MEMBERS, (n * 7 + 3) % MEMBERS
        if addressee == asker:
            addressee = (asker + 1) % MEMBERS
        qid = f"q{n}"
        run(
            c.Ask(
                now,
                TEAM,
                qid,
                f"m{addressee}",
                "Which endpoint returns daemon state? " * 4,
                context="I am implementing the phone's daemon list.",
                member_key=f"key{asker}",
            )
        )
        run(c.RecordDelivery(now + 1, TEAM, f"{TEAM}/{qid}/question", "delivered"))
        if n >= EXCHANGES - OPEN:
            continue
        run(c.RecordDelivery(now + 2, TEAM, f"{TEAM}/{qid}/question", "accepted"))
        run(
            c.Reply(
                now + 3,
                TEAM,
                qid,
                "GET /v1/daemon/state, see api.ts " * 3,
                ("src/api.ts:42",),
                member_key=f"key{addressee}",
            )
        )
        run(c.RecordDelivery(now + 4, TEAM, f"{TEAM}/{qid}/answer", "accepted"))
    return ledger.teams[TEAM]


def best(runs: int, body: Callable[[], object]) -> float:
    """The fastest of `runs` timings of `body`, in seconds (the least disturbed by the other workers)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        body()
        times.append(time.perf_counter() - started)
    return min(times)


async def loop_stall(state: Any, threaded: bool, runs: int) -> float:
    """The least, over `runs` checkpoints of `state`, of the longest wait beyond 1 ms of a ticking task."""
    stalls = []

    async def tick(worst: list[float], done: trio.Event) -> None:
        while not done.is_set():
            started = time.perf_counter()
            await trio.sleep(0.001)
            worst[0] = max(worst[0], time.perf_counter() - started - 0.001)

    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as scratch:
        store, _ = await JournalStore.open(Path(scratch))
        for n in range(runs):
            await store.append({"n": n})
            worst, done = [0.0], trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tick, worst, done)
                await trio.sleep(0.02)
                worst[0] = 0.0
                await store.checkpoint(
                    store.durable_seq, partial(to_json, state) if threaded else to_json(state)
                )
                done.set()
            stalls.append(worst[0])
        await store.aclose()
    return min(stalls)


def measure(title: str, state: Any, recover: Callable[[Any], object], runs: int) -> None:
    document = to_json(state)
    record = encode_record("payload", 1, document) + b"\n"
    parsed = json.loads(record)["payload"]  # plain JSON values: `document` holds enum members, str subclasses
    decoded = from_json(parsed, type(state))
    if decoded != state:
        raise SystemExit(f"{title}: the checkpoint does not decode to the state it encodes")
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    base_dumps = best(runs, lambda: json.dumps(document, separators=(",", ":"), ensure_ascii=False))
    base_loads = best(runs, lambda: json.loads(text))
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as scratch:
        directory = Path(scratch)
        (directory / checkpoint_name(1)).write_bytes(record)
        ops = FileOps()
        if recover(scan_store(directory, ops).recovery) != state:
            raise SystemExit(f"{title}: recovery does not rebuild the state it checkpointed")
        figures = {
            "to_json": best(runs, lambda: to_json(state)),
            "encode (to_json + record)": best(runs, lambda: encode_record("payload", 1, to_json(state))),
            "from_json": best(runs, lambda: from_json(parsed, type(state))),
            "recover (scan + replay)": best(runs, lambda: recover(scan_store(directory, ops).recovery)),
        }
    on_loop = trio.run(loop_stall, state, False, runs)
    try:
        threaded = trio.run(loop_stall, state, True, runs)
    except* TypeError:  # a journal from before issue 18 takes no callable payload: the A/B's "before"
        threaded = math.nan
    print(f"{title}: {len(record) / 1e6:.1f} MB checkpoint record")
    print(f"  json.dumps {base_dumps * 1e3:7.1f} ms   json.loads {base_loads * 1e3:7.1f} ms   (baselines)")
    for name, seconds in figures.items():
        base = base_loads if name.startswith(("from", "recover")) else base_dumps
        which = "loads" if base is base_loads else "dumps"
        print(f"  {name:<27} {seconds * 1e3:7.1f} ms   {seconds / base:5.1f}x json.{which}")
    print(f"  loop stall, encoded on the loop {on_loop * 1e3:7.1f} ms")
    if math.isnan(threaded):
        print("  loop stall, encoded in a thread     n/a (this journal takes no callable payload)")
    else:
        shown = f"{threaded * 1e3:7.1f} ms   {threaded / on_loop:5.2f}x on the loop"
        print(f"  loop stall, encoded in a thread {shown}")


def advance(desk: d.Desk, steps: int) -> d.Desk:
    """`desk` after `steps` more desk steps of the bench's stream at its bound: the head of each agent's
    queue is written, its turn seen, and it is read (no new notice: the desk is full)."""
    now = max(n.updated_at for n in desk.notices.values())
    done = 0
    for agent in AGENTS * 10:
        if done >= steps:
            break
        head = desk.sessions[agent].queue[0]
        now += DEFAULT_LIMITS.write_settle_ms
        for command in (
            d.Observe(now, agent, d.Observed.IDLE),
            d.WriteStarted(now + 1, head, d.Observed.IDLE, now),
            d.WriteFinished(now + 2, head, d.WriteResult.OK),
            d.TurnObserved(now + 3, head),
            d.InboxRead(now + 4, (head,)),
        ):
            outcome = d.step(desk, command, DEFAULT_LIMITS)
            if isinstance(outcome, Rejected):
                raise SystemExit(f"bench stream refused {command!r}: {outcome}")
            desk = outcome.state
            done += 1
        now += 5
    return desk


async def parted_checkpoint(
    store: JournalStore, parts: DeskParts, desk: d.Desk, made: list[float]
) -> tuple[float, int]:
    """One desk checkpoint in parts through `store`: its wall time, and the bytes it wrote. The CPU time
    of making its payload and parts (writes included) goes into `made`."""
    before = _store_bytes(store.directory)
    seq = await store.append({"n": store.journaled_seq + 1})

    def payload() -> dict[str, object]:
        started = time.thread_time()
        try:
            return parts.payload(store, seq, desk)
        finally:
            made.append(time.thread_time() - started)

    started = time.perf_counter()
    await store.checkpoint(seq, payload)
    elapsed = time.perf_counter() - started
    return elapsed, _store_bytes(store.directory, since=before)


def _store_bytes(directory: Path, since: dict[str, int] | None = None) -> Any:
    files = (p for p in directory.iterdir() if p.name.startswith(("part-", "checkpoint-")))
    sizes = {p.name: p.stat().st_size for p in files}
    if since is None:
        return sizes
    return sum(size for name, size in sizes.items() if name not in since)


def measure_parts(desk: d.Desk, runs: int) -> None:
    later = advance(desk, 256)
    changed = sum(1 for notice_id, n in later.notices.items() if desk.notices[notice_id] is not n)

    async def run() -> tuple[list[float], list[float], list[int], list[float], list[float], float]:
        full, incremental, written, full_cpu, incremental_cpu = [], [], [], [], []
        recover = math.inf
        for _ in range(runs):
            with tempfile.TemporaryDirectory(prefix="bench-parts-") as scratch:
                store, _ = await JournalStore.open(Path(scratch))
                parts = DeskParts()
                elapsed, size = await parted_checkpoint(store, parts, desk, full_cpu)
                full.append(elapsed)
                written.append(size)
                elapsed, size = await parted_checkpoint(store, parts, later, incremental_cpu)
                incremental.append(elapsed)
                written.append(size)
                await store.aclose()
                ops = FileOps()
                started = time.perf_counter()
                recovered = replay_desk(MACHINE, scan_store(Path(scratch), ops).recovery, DEFAULT_LIMITS)
                recover = min(recover, time.perf_counter() - started)
                if recovered != later:
                    raise SystemExit("desk in parts: recovery does not rebuild the desk it checkpointed")
        return full, incremental, written, full_cpu, incremental_cpu, recover

    full, incremental, written, full_cpu, incremental_cpu, recover = trio.run(run)
    document = to_json(later)
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    base_dumps = best(runs, lambda: json.dumps(document, separators=(",", ":"), ensure_ascii=False))
    base_loads = best(runs, lambda: json.loads(text))
    print(f"desk in parts, {len(later.notices):,} records; {changed} changed in the 256 steps between two")
    print(f"  json.dumps {base_dumps * 1e3:7.1f} ms   json.loads {base_loads * 1e3:7.1f} ms   (baselines)")
    rows = (
        ("first checkpoint: payload + parts, CPU", min(full_cpu), base_dumps, "dumps"),
        ("first checkpoint, whole (fsyncs too)", min(full), base_dumps, "dumps"),
        ("next checkpoint: payload + parts, CPU", min(incremental_cpu), base_dumps, "dumps"),
        ("next checkpoint, whole (fsyncs too)", min(incremental), base_dumps, "dumps"),
        ("recover (scan parts + replay)", recover, base_loads, "loads"),
    )
    for name, seconds, base, which in rows:
        print(f"  {name:<38} {seconds * 1e3:7.1f} ms   {seconds / base:5.2f}x json.{which}")
    print(f"  bytes written: first {written[0] / 1e6:.2f} MB, next {written[1] / 1e6:.3f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description="checkpoint encode, decode and recovery at the bounds")
    parser.add_argument("--runs", type=int, default=5, help="timings per figure; the fastest is shown (5)")
    args = parser.parse_args()
    desk = build_desk()
    measure(
        f"desk, {len(desk.notices):,} delivery records",
        desk,
        lambda recovery: replay_desk(MACHINE, recovery, DEFAULT_LIMITS),
        args.runs,
    )
    measure_parts(desk, args.runs)
    team = build_team()
    measure(
        f"team, {len(team.exchanges)} exchanges",
        team,
        lambda recovery: replay(TEAM, recovery, DEFAULT_LIMITS)[0],
        args.runs,
    )


if __name__ == "__main__":
    main()
