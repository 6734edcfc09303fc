# Measures the ledger store against its goals in one run (about a minute): durable append latency against a
# bare write+fsync of the same bytes, group-commit throughput with 32 concurrent writers, and recovery time
# and peak memory of a data directory at the seed's full bounds (100 teams x 500 exchanges).
#
# usage: .venv/bin/python scripts/bench_journal.py [--dir PATH]   (default: a temp dir on the project's disk)
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from bench_support import quantile

from harness.io.journal import JournalStore
from harness.io.journal_files import encode_record, ledger_store_dir

ENTRY_BYTES = 1_000
LATENCY_OPS = 2_000
WRITERS = 32
THROUGHPUT_SECONDS = 3.0
STORES = 100
ENTRIES_PER_STORE = 500
CHECKPOINT_EVERY_NTH_STORE = 3


def _entry(i: int) -> dict[str, object]:
    return {"type": "Ask", "i": i, "text": "q" * ENTRY_BYTES}


async def _append_latency(directory: Path) -> list[float]:
    store, _ = await JournalStore.open(directory)
    samples = []
    for i in range(LATENCY_OPS):
        start = time.perf_counter()
        await store.append(_entry(i))
        samples.append(time.perf_counter() - start)
    await store.aclose()
    return samples


def _bare_latency(path: Path) -> list[float]:
    line = encode_record("entry", 1, _entry(0)) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    samples = []
    try:
        for _ in range(LATENCY_OPS):
            start = time.perf_counter()
            os.write(fd, line)
            os.fsync(fd)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return samples


async def _thread_hop() -> list[float]:
    samples = []
    for _ in range(LATENCY_OPS):
        start = time.perf_counter()
        await trio.to_thread.run_sync(lambda: None)
        samples.append(time.perf_counter() - start)
    return samples


async def _throughput(directory: Path) -> tuple[int, float]:
    store, _ = await JournalStore.open(directory)
    done = 0
    deadline = trio.current_time() + THROUGHPUT_SECONDS

    async def writer(w: int) -> None:
        nonlocal done
        while trio.current_time() < deadline:
            await store.append(_entry(w))
            done += 1

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for w in range(WRITERS):
            nursery.start_soon(writer, w)
    elapsed = time.perf_counter() - start
    await store.aclose()
    return done, elapsed


async def _build_data_dir(home: Path) -> int:
    async def one(team: int) -> None:
        store, _ = await JournalStore.open(ledger_store_dir(home, f"team{team:03d}"))
        for i in range(ENTRIES_PER_STORE):
            await store.append(_entry(i))
            if team % CHECKPOINT_EVERY_NTH_STORE == 0 and i + 1 == ENTRIES_PER_STORE // 2:
                # A checkpoint the size of the state so far (the reducer's state grows with the ledger).
                await store.checkpoint(i + 1, {"exchanges": [_entry(j) for j in range(i + 1)]})
        await store.aclose()

    limiter = trio.CapacityLimiter(8)

    async def bounded(team: int) -> None:
        async with limiter:
            await one(team)

    async with trio.open_nursery() as nursery:
        for team in range(STORES):
            nursery.start_soon(bounded, team)
    return sum(p.stat().st_size for p in home.rglob("*") if p.is_file())


async def _recover(home: Path) -> dict[str, object]:
    """What a restarting daemon does: open every store under the data directory and keep it open."""
    start = time.perf_counter()
    stores = []
    entries = 0
    root = home / "teams" / "ledgers"
    for name in sorted(os.listdir(root)):
        store, recovery = await JournalStore.open(root / name)
        stores.append((store, recovery))
        entries += len(recovery.entries) + recovery.checkpoint_seq
    elapsed = time.perf_counter() - start
    for store, _ in stores:
        await store.aclose()
    return {
        "seconds": elapsed,
        "stores": len(stores),
        "entries": entries,
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, help="scratch directory (default: a temp dir beside the project)")
    parser.add_argument("--recover", type=Path, help=argparse.SUPPRESS)  # the measured child process
    args = parser.parse_args()
    if args.recover is not None:
        print(json.dumps(trio.run(_recover, args.recover)))
        return

    scratch = args.dir or Path(__file__).resolve().parent.parent
    base = Path(tempfile.mkdtemp(prefix="bench-journal-", dir=scratch))
    try:
        durable = trio.run(_append_latency, base / "latency")
        bare = _bare_latency(base / "bare.jsonl")
        p50, p99 = quantile(durable, 0.5), quantile(durable, 0.99)
        b50, b99 = quantile(bare, 0.5), quantile(bare, 0.99)
        print(f"append latency ({LATENCY_OPS} x {ENTRY_BYTES} B, one writer):")
        hop = quantile(trio.run(_thread_hop), 0.5)
        print(f"  durable append   p50 {p50 * 1e3:.3f} ms  p99 {p99 * 1e3:.3f} ms")
        print(f"  bare write+fsync p50 {b50 * 1e3:.3f} ms  p99 {b99 * 1e3:.3f} ms")
        print(f"  ratio p50 {p50 / b50:.2f}  p99 {p99 / b99:.2f}  (goal <= 1.5)")
        print(f"  of which the fsync thread hop alone (trio.to_thread no-op) p50 {hop * 1e3:.3f} ms")

        done, elapsed = trio.run(_throughput, base / "throughput")
        print(f"group commit: {WRITERS} writers, {done} durable appends in {elapsed:.2f} s = "
              f"{done / elapsed:,.0f} ops/s (goal >= 2,000/s)")

        home = base / "home"
        start = time.perf_counter()
        size = trio.run(_build_data_dir, home)
        built = time.perf_counter() - start
        print(f"data dir: {STORES} stores x {ENTRIES_PER_STORE} entries, a checkpoint in every "
              f"{CHECKPOINT_EVERY_NTH_STORE}rd, {size / 1e6:.1f} MB on disk (built in {built:.1f} s)")
        child = subprocess.run(
            [sys.executable, __file__, "--recover", str(home)], check=True, capture_output=True, text=True
        )
        result = json.loads(child.stdout)
        print(f"recovery: {result['stores']} stores, {result['entries']} entries in "
              f"{result['seconds']:.2f} s (goal < 2 s); peak RSS of that process "
              f"{result['maxrss_mb']:.0f} MB (goal < 250 MB)")
    finally:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
