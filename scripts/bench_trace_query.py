# How long `harness trace query` takes over a 100,000-line trace (the goal: a filtered query in
# under a second), printed beside a plain grep-like scan of the same files in the same run, so the cost of
# decoding and filtering is seen against the cost of reading. No assertion: the numbers are for a person
# to judge.
#
# usage: .venv/bin/python scripts/bench_trace_query.py [--dir PATH]   (default: a temp dir)
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import trio

from harness.core.redaction import redactor
from harness.io import trace, trace_files

LINES = 100_000
EXCHANGES = 2_000
BATCH = 1_000


async def write(directory: Path) -> None:
    """A session's worth of ledger, desk and participant events (about 20 MB, so rotation takes part)."""
    bounds = trace.TraceBounds(file_bytes=8 << 20, rotated_files=8)
    async with await trace.TraceWriter.open(directory, redactor({}), bounds=bounds) as writer:
        for index in range(LINES):
            exchange = f"{index % EXCHANGES:032x}"
            kinds = [("ledger", "ask"), ("desk", "notice"), (f"member{index % 5}", "tool_call")]
            source, kind = kinds[index % 3]
            writer.emit(source, {
                "type": kind, "at": 1_700_000_000_000 + index, "exchangeId": exchange,
                "memberId": f"member{index % 5}", "text": "some words of the event " * 6,
            })
            if index % BATCH == BATCH - 1:
                await writer.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as temp:
        directory = Path(temp) / "trace"
        started = time.perf_counter()
        trio.run(write, directory)
        size = sum(f.stat().st_size for f in trace_files.trace_files(directory))
        print(f"wrote {LINES} lines ({size / 1e6:.1f} MB, {len(trace_files.trace_files(directory))} files) "
              f"in {time.perf_counter() - started:.2f} s")
        exchange = f"{7:032x}"
        where = trace_files.TraceFilter(types=("notice",), exchanges=(exchange,), since=1_700_000_000_000)
        started = time.perf_counter()
        found = sum(1 for _ in trace_files.query(directory, where))
        query_s = time.perf_counter() - started
        started = time.perf_counter()
        needle = exchange.encode()
        grepped = sum(
            1
            for f in trace_files.trace_files(directory)
            for line in f.read_bytes().splitlines()
            if needle in line
        )
        grep_s = time.perf_counter() - started
        started = time.perf_counter()
        recent = trace_files.TraceFilter(since=1_700_000_000_000)
        scanned = sum(1 for _ in trace_files.query(directory, recent))
        full_s = time.perf_counter() - started
        print(f"query --type notice --exchange X --since T: {found} lines in {query_s * 1000:.1f} ms")
        print(f"grep-like scan for X:                      {grepped} lines in {grep_s * 1000:.1f} ms")
        print(f"query --since T (every line decoded):      {scanned} lines in {full_s * 1000:.1f} ms")


if __name__ == "__main__":
    main()
