# The trace (io/trace.py) and `harness trace`: one {source, seq, event} line per event, seq monotonic across
# sources, files and restarts of the writer, durable by group commit, bounded by rotation, a torn tail
# tolerated, and the CLI's filters and timings read offline.
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from harness.cli.main import run
from harness.core.redaction import redactor
from harness.io import trace, trace_files
from harness.io.fileops import FileOps

NO_SECRETS = redactor({})


class CountingOps(FileOps):
    def __init__(self) -> None:
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)


async def _open(directory: Path, **kwargs: object) -> trace.TraceWriter:
    return await trace.TraceWriter.open(directory, NO_SECRETS, **kwargs)  # type: ignore[arg-type]


def _all_durable(traces: trace.TeamTraces) -> bool:
    """Every written line fsynced. `_unsynced` alone is not it: a group empties it as its fsyncs start, and a
    loaded machine may not have run the second team's fsync yet."""
    return not traces._unsynced and all(w.durable_seq == w.last_seq for w in traces._writers.values())


def _seqs(path: Path) -> list[int]:
    return [line.seq for line in trace_files.read_trace(path)]


async def test_seq_is_monotonic_across_sources_and_restarts_of_the_writer(tmp_path: Path) -> None:
    """"seq is monotonic across the whole trace": three writers in turn, each on the same directory."""
    directory = trace_files.team_trace_dir(tmp_path, "t1")
    sources = ["ledger", "desk", "board", "orchestrator", "alice"]
    for restart in range(3):
        async with await _open(directory) as writer:
            for index, source in enumerate(sources):
                await writer.append(source, {"type": "step", "restart": restart, "index": index})
    lines = list(trace_files.read_trace(directory))
    assert [line.seq for line in lines] == list(range(1, 16))
    assert [line.source for line in lines] == sources * 3
    assert all(isinstance(line.event["at"], int) for line in lines)  # stamped when the event has none
    assert oct(directory.stat().st_mode & 0o777) == "0o700"
    assert all(oct(f.stat().st_mode & 0o777) == "0o600" for f in trace_files.trace_files(directory))


async def test_concurrent_appends_share_fsyncs_and_are_all_durable(tmp_path: Path) -> None:
    ops = CountingOps()
    writer = await _open(tmp_path / "t", ops=ops)
    async with trio.open_nursery() as nursery:
        for index in range(200):
            nursery.start_soon(writer.append, f"m{index % 7}", {"type": "x", "index": index})
    assert writer.durable_seq == 200
    await writer.aclose()
    lines = list(trace_files.read_trace(tmp_path / "t"))
    assert sorted(line.event["index"] for line in lines) == list(range(200))  # type: ignore[type-var]
    assert [line.seq for line in lines] == list(range(1, 201))
    assert ops.fsyncs < 200  # group commit: appends made during an fsync share the next one


async def test_rotation_keeps_the_bounds_and_the_newest_lines(tmp_path: Path) -> None:
    bounds = trace.TraceBounds(file_bytes=2_000, rotated_files=2)
    directory = tmp_path / "t"
    async with await _open(directory, bounds=bounds) as writer:
        for index in range(300):
            writer.emit("ledger", {"type": "x", "at": index, "pad": "y" * 40})
            if index % 17 == 0:
                await writer.flush()
    files = trace_files.trace_files(directory)
    assert len(files) == bounds.rotated_files + 1
    assert all(f.stat().st_size <= bounds.file_bytes for f in files)
    seqs = _seqs(directory)
    assert seqs == list(range(seqs[0], 301)) and seqs[0] > 1  # the oldest files were dropped, whole
    async with await _open(directory, bounds=bounds) as writer:  # a restart continues after the newest
        assert await writer.append("desk", {"type": "x"}) == 301


class FailingFsync(CountingOps):
    closes = 0

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        raise OSError(5, "EIO")

    def close(self, fd: int) -> None:
        self.closes += 1
        super().close(fd)


async def test_write_puts_lines_in_the_file_without_an_fsync_and_sync_adds_one(tmp_path: Path) -> None:
    """The daemon's trace rides the group commit: lines are in the file (safe from a killed process) with no
    fsync, and one `sync` makes every line written so far durable."""
    ops = CountingOps()
    writer = await _open(tmp_path / "t", ops=ops)
    await writer.append("ledger", {"type": "first"})  # the first file: its name and its line
    opened = ops.fsyncs
    for index in range(5):
        writer.emit("ledger", {"type": "x", "index": index})
        writer.write()
    assert _seqs(tmp_path / "t") == [1, 2, 3, 4, 5, 6] and ops.fsyncs == opened
    assert writer.durable_seq == 1
    await writer.sync()
    await writer.sync()  # nothing new: no second fsync
    assert ops.fsyncs == opened + 1 and writer.durable_seq == 6
    await writer.aclose()


async def test_a_full_file_is_fsynced_before_the_next_is_started(tmp_path: Path) -> None:
    """`sync` only sees the newest file, so rotation makes the one it leaves durable itself."""
    ops = CountingOps()
    bounds = trace.TraceBounds(file_bytes=400, rotated_files=4)
    async with await _open(tmp_path / "t", ops=ops, bounds=bounds) as writer:
        writer.emit("ledger", {"type": "x", "pad": "y" * 200})
        writer.write()
        written = ops.fsyncs
        writer.emit("ledger", {"type": "x", "pad": "y" * 200})
        writer.write()  # past the bound
        assert ops.fsyncs == written + 1 and len(trace_files.trace_files(tmp_path / "t")) == 2


async def test_a_failed_sync_stops_the_writer(tmp_path: Path) -> None:
    writer = await _open(tmp_path / "t")
    writer.emit("ledger", {"type": "x"})
    writer.write()
    writer._ops = FailingFsync()  # the disk fails from here
    with pytest.raises(trace.TraceFailed):
        await writer.sync()
    with pytest.raises(trace.TraceFailed):
        writer.emit("ledger", {"type": "y"})
    await writer.aclose()


async def test_a_group_sync_is_one_worker_thread_call_and_a_failed_trace_stops_only_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start writes to every team's trace at once; their group fsync costs one hop to a worker thread,
    not one per trace. A trace whose fsync fails is stopped, and the others of its group are durable."""
    writers = [await _open(tmp_path / name) for name in ("a", "b", "c")]
    for writer in writers:
        writer.emit("ledger", {"type": "x"})
        writer.write()
    writers[1]._ops = FailingFsync()
    hops: list[object] = []
    real = trio.to_thread.run_sync

    async def counted(fn: object, *args: object) -> object:
        hops.append(fn)
        return await real(fn, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    failed = await trace.sync_writers(writers)
    assert len(hops) == 1
    assert list(failed) == [writers[1]] and isinstance(failed[writers[1]], trace.TraceFailed)
    assert [w.durable_seq == w.last_seq for w in writers] == [True, False, True]
    assert writers[1]._ops.closes == 1  # its file's duplicate, closed though its fsync failed
    with pytest.raises(trace.TraceFailed):
        writers[1].emit("ledger", {"type": "y"})
    again = await trace.sync_writers(writers)  # nothing is due but the stopped trace, which is not retried
    assert list(again) == [writers[1]] and "not made durable" in str(again[writers[1]]) and len(hops) == 1
    monkeypatch.undo()
    for writer in writers:
        await writer.aclose()


async def test_a_group_sync_without_a_worker_thread_fails_each_trace_and_closes_every_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When no worker thread can start, nothing was fsynced: every trace of the group is stopped (none is
    reported durable), no duplicate descriptor is left open, and a writer named twice is synced once."""
    writers = [await _open(tmp_path / name) for name in ("a", "b")]
    for writer in writers:
        writer.emit("ledger", {"type": "x"})
        writer.write()
    open_before = len(os.listdir("/proc/self/fd"))

    async def no_thread(fn: object, *args: object) -> object:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(trio.to_thread, "run_sync", no_thread)
    failed = await trace.sync_writers([*writers, writers[0]])
    monkeypatch.undo()
    assert set(failed) == set(writers) and all(isinstance(e, trace.TraceFailed) for e in failed.values())
    assert [w.durable_seq for w in writers] == [0, 0]
    assert len(os.listdir("/proc/self/fd")) == open_before
    for writer in writers:
        await writer.aclose()


async def test_team_traces_fsync_every_written_trace_as_one_group_after_the_delay(tmp_path: Path) -> None:
    """Lines written at once, one fsync per team per group, the group `sync_delay_ms` after the first."""
    ops = CountingOps()
    traces = trace.TeamTraces(tmp_path, lambda: NO_SECRETS, log=lambda line: None, ops=ops)
    traces.sync_delay_ms = 200
    async with trio.open_nursery() as nursery:
        nursery.start_soon(traces.run)
        for team in ("t1", "t2"):
            traces.emit(team, trace_files.LEDGER, {"type": "opened"})
        with trio.fail_after(30):
            while traces.view()["open"] != 2 or traces.view()["queued"] != 0 or not _all_durable(traces):
                await trio.sleep(0.01)
        opened = ops.fsyncs
        for index in range(50):
            traces.emit(f"t{index % 2 + 1}", trace_files.DESK, {"type": "x", "index": index})
        assert len(_seqs(trace_files.team_trace_dir(tmp_path, "t1"))) == 26  # in the file as emitted
        assert ops.fsyncs == opened
        with trio.fail_after(30):
            while not _all_durable(traces):
                await trio.sleep(0.01)
        assert ops.fsyncs == opened + 2
        traces.close()
    assert traces.written == 52 and traces.lost == 0


async def test_an_oversized_event_is_traced_as_a_stub(tmp_path: Path) -> None:
    async with await _open(tmp_path / "t") as writer:
        await writer.append("alice", {"type": "tool_call", "at": 5, "text": "z" * trace_files.MAX_LINE_BYTES})
    (line,) = trace_files.read_trace(tmp_path / "t")
    assert line.event["type"] == trace.OVERSIZED and line.event["eventType"] == "tool_call"
    assert isinstance(line.event["bytes"], int) and line.event["bytes"] > trace_files.MAX_LINE_BYTES


async def test_a_bad_source_or_event_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    async with await _open(tmp_path / "t") as writer:
        for source, event in (("", {"type": "x"}), ("a b", {"type": "x"}), ("ok", {"kind": "no type"})):
            with pytest.raises(ValueError):
                writer.emit(source, event)
        assert writer.last_seq == 0


async def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    async with await _open(tmp_path / "t"):
        with pytest.raises(trace.TraceLocked):
            await _open(tmp_path / "t")


async def test_a_torn_last_line_is_skipped_and_never_rewritten(tmp_path: Path) -> None:
    """A crash mid-write leaves a prefix of a line: readers skip it, the next writer leaves its bytes alone
    and starts a new file, and seq continues after the last complete line."""
    directory = tmp_path / "t"
    async with await _open(directory) as writer:
        for index in range(3):
            await writer.append("ledger", {"type": "x", "index": index})
    (first,) = trace_files.trace_files(directory)
    torn = trace_files.encode_line("ledger", 4, {"type": "x", "index": 3})[:-9]
    with first.open("ab") as file:
        file.write(torn)
    before = first.read_bytes()
    assert _seqs(directory) == [1, 2, 3]
    async with await _open(directory) as writer:
        assert await writer.append("desk", {"type": "y"}) == 4
    assert first.read_bytes() == before
    assert len(trace_files.trace_files(directory)) == 2
    assert _seqs(directory) == [1, 2, 3, 4]


class ReadCountingOps(FileOps):
    def __init__(self) -> None:
        self.read_bytes_total = 0

    def read(self, fd: int, size: int) -> bytes:
        data = super().read(fd, size)
        self.read_bytes_total += len(data)
        return data


async def test_a_trace_file_grown_past_any_bound_is_opened_by_its_end(tmp_path: Path) -> None:
    """A damaged trace file (here sparse, 4 GiB) cost its writer a read of the whole of it, in memory, when
    the daemon opened the trace: no input may end a process. The writer reads only as much of the end as a
    torn line and a whole one may hold, and goes on after the last line's seq, in a new file."""
    directory = tmp_path / "t"
    async with await _open(directory) as writer:
        await writer.append("ledger", {"type": "x"})
    (first,) = trace_files.trace_files(directory)
    with first.open("r+b") as file:
        file.truncate(4 << 30)
        file.seek(0, os.SEEK_END)
        file.write(b"\n" + trace_files.encode_line("ledger", 41, {"type": "x"}))
    ops = ReadCountingOps()
    async with await _open(directory, ops=ops) as writer:
        assert await writer.append("desk", {"type": "y"}) == 42
    assert ops.read_bytes_total <= 2 * trace_files.MAX_LINE_BYTES + 2
    assert len(trace_files.trace_files(directory)) == 2


async def test_a_torn_line_as_long_as_a_line_still_leaves_the_last_whole_line_found(tmp_path: Path) -> None:
    """The end read covers a torn line of nearly a line's bound after a whole one of the bound: the seq goes
    on after the whole line, and a file whose end holds no whole line within that is damage, not a guess."""
    directory = tmp_path / "t"
    directory.mkdir(mode=0o700)
    path = directory / "trace-000000000001.ndjson"
    pad = "p" * (trace_files.MAX_LINE_BYTES - 200)
    whole = trace_files.encode_line("ledger", 7, {"type": "x", "pad": pad})
    assert len(whole) <= trace_files.MAX_LINE_BYTES
    path.write_bytes(b"x" * 5_000 + b"\n" + whole + b"{" * (trace_files.MAX_LINE_BYTES - 1))
    async with await _open(directory) as writer:
        assert writer.last_seq == 7
    path.write_bytes(b"\n" + b"{" * (2 * trace_files.MAX_LINE_BYTES + 1))
    with pytest.raises(trace_files.TraceDamaged):
        await _open(directory)


def test_damage_before_the_last_line_is_reported_with_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "trace-000000000001.ndjson"
    good = trace_files.encode_line("ledger", 1, {"type": "x"})
    path.write_bytes(good + b'{"not":"a trace line"}\n' + trace_files.encode_line("ledger", 2, {"type": "x"}))
    with pytest.raises(trace_files.TraceDamaged) as raised:
        list(trace_files.read_trace(path))
    assert raised.value.offset == len(good)


@pytest.mark.parametrize("hostile", [b"[" * 100_000, b'{"a":' * 50_000, b"x" * ((1 << 20) + 10)])
def test_a_deep_or_huge_line_is_damage_not_a_crash(tmp_path: Path, hostile: bytes) -> None:
    """A trace file is read offline and may come from anywhere: 100,000 nested brackets or an oversized
    line is reported as damage at its offset (the standard parser raised RecursionError)."""
    path = tmp_path / "trace-000000000001.ndjson"
    good = trace_files.encode_line("ledger", 1, {"type": "x"})
    path.write_bytes(good + hostile + b"\n" + trace_files.encode_line("ledger", 2, {"type": "x"}))
    with pytest.raises(trace_files.TraceDamaged) as raised:
        list(trace_files.read_trace(path))
    assert raised.value.offset == len(good)


# --- the CLI ------------------------------------------------------------------------------------------------

# Two exchanges of a facilitate session as the daemon is to emit them (spec/trace-v1.md): e1 goes ask ->
# delivered -> accepted -> answered -> continuation; e2 is ignored, reminded once, violated and expired.
SESSION: list[tuple[str, dict[str, object]]] = [
    ("orchestrator", {"type": "session_start", "at": 1_000, "mode": "facilitate"}),
    ("ledger", {"type": "ask", "at": 1_100, "teamId": "t", "exchangeId": "e1", "memberId": "lead",
                "to": "bob"}),
    ("ledger", {"type": "ask", "at": 1_150, "teamId": "t", "exchangeId": "e2", "memberId": "lead",
                "to": "eve"}),
    ("desk", {"type": "notice", "at": 1_300, "exchangeId": "e1", "memberId": "bob", "kind": "question",
              "state": "delivered"}),
    ("desk", {"type": "notice", "at": 1_320, "exchangeId": "e2", "memberId": "eve", "kind": "question",
              "state": "delivered"}),
    ("desk", {"type": "notice", "at": 1_700, "exchangeId": "e1", "memberId": "bob", "kind": "question",
              "state": "accepted"}),
    ("bob", {"type": "tool_call", "at": 2_000, "tool": "team reply"}),
    ("ledger", {"type": "reply", "at": 2_100, "exchangeId": "e1", "memberId": "bob"}),
    ("ledger", {"type": "question_ended", "at": 2_100, "exchangeId": "e1", "state": "answered"}),
    ("desk", {"type": "notice", "at": 2_400, "exchangeId": "e1", "memberId": "lead", "kind": "answer",
              "state": "delivered"}),
    ("desk", {"type": "notice", "at": 2_900, "exchangeId": "e1", "memberId": "lead", "kind": "answer",
              "state": "accepted"}),
    ("orchestrator", {"type": "reminder", "at": 5_000, "exchangeId": "e2", "memberId": "eve"}),
    ("orchestrator", {"type": "protocol_violation", "at": 9_000, "exchangeId": "e2", "memberId": "eve",
                      "rule": "owed_ask_unanswered"}),
    ("ledger", {"type": "question_ended", "at": 9_000, "exchangeId": "e2", "state": "expired",
                "reason": "no_answer"}),
    ("orchestrator", {"type": "summary", "at": 9_500, "concluded": True, "stopped": False}),
]


async def _write_session(directory: Path) -> None:
    async with await _open(directory) as writer:
        for source, event in SESSION:
            writer.emit(source, event)


@pytest.fixture
def session_trace(tmp_path: Path) -> Path:
    directory = trace_files.session_trace_dir(tmp_path, "s1")
    trio.run(_write_session, directory)
    return directory


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert run([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert isinstance(document, dict)
    return document


def _query(capsys: pytest.CaptureFixture[str], path: Path, *filters: str) -> list[int]:
    lines = _json(capsys, "trace", "query", str(path), *filters)["lines"]
    assert isinstance(lines, list)
    return [line["seq"] for line in lines]


def test_query_filters_by_source_type_exchange_member_and_time(
    session_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _query(capsys, session_trace) == list(range(1, len(SESSION) + 1))
    assert _query(capsys, session_trace, "--source", "desk") == [4, 5, 6, 10, 11]
    assert _query(capsys, session_trace, "--source", "desk", "--source", "bob") == [4, 5, 6, 7, 10, 11]
    assert _query(capsys, session_trace, "--type", "question_ended") == [9, 14]
    assert _query(capsys, session_trace, "--exchange", "e2") == [3, 5, 12, 13, 14]
    assert _query(capsys, session_trace, "--member", "eve") == [3, 5, 12, 13]  # memberId or `to`
    assert _query(capsys, session_trace, "--member", "bob", "--type", "tool_call") == [7]  # the source
    assert _query(capsys, session_trace, "--since", "2100", "--until", "5000") == [8, 9, 10, 11, 12]
    assert _query(capsys, session_trace, "--until", "1970-01-01T00:00:01.100") == [1, 2]
    e1_notices = _query(capsys, session_trace, "--exchange", "e1", "--type", "notice", "--since", "1500")
    assert e1_notices == [6, 10, 11]


def test_query_refuses_a_bad_time_and_a_missing_trace(session_trace: Path, tmp_path: Path) -> None:
    assert run(["trace", "query", str(session_trace), "--since", "yesterday", "--json"]) == 2
    assert run(["trace", "query", str(tmp_path / "nothing"), "--json"]) == 1


def test_summary_times_each_exchange_and_lists_the_violation(
    session_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`harness trace summary` "prints the timings and the one violation"."""
    result = _json(capsys, "trace", "summary", str(session_trace))
    assert result["lines"] == len(SESSION) and (result["firstSeq"], result["lastSeq"]) == (1, len(SESSION))
    e1, e2 = result["exchanges"]  # type: ignore[misc]
    assert e1["sinceAsk"] == {"asked": 0, "delivered": 200, "accepted": 600, "answered": 1_000,
                              "continuation": 1_800}
    assert (e1["asker"], e1["to"], e1["state"], e1["violations"]) == ("lead", "bob", "answered", 0)
    assert e2["sinceAsk"] == {"asked": 0, "delivered": 170}
    assert (e2["state"], e2["reason"], e2["violations"]) == ("expired", "no_answer", 1)
    (violation,) = result["violations"]  # type: ignore[misc]
    assert (violation["seq"], violation["memberId"], violation["rule"]) == (13, "eve", "owed_ask_unanswered")
    assert run(["trace", "summary", str(session_trace)]) == 0
    shown = capsys.readouterr().out
    assert "owed_ask_unanswered" in shown and "+1800 ms" in shown.replace("…", "")


def test_export_writes_a_private_file_redacted_again(
    session_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redaction is on for exports too: a value that became a secret after the trace was written (here the
    member name `eve`, made a listed variable's value) is redacted on the way out."""
    monkeypatch.setenv("HARNESS_REDACTION_ENV_VARS", "SESSION_SECRET")
    monkeypatch.setenv("SESSION_SECRET", "owed_ask_unanswered")
    out = tmp_path / "export.ndjson"
    result = _json(capsys, "trace", "export", str(session_trace), "--exchange", "e2", "--out", str(out))
    assert result == {"exported": 5, "out": str(out)}
    assert oct(os.stat(out).st_mode & 0o777) == "0o600"
    data = out.read_bytes()
    assert b"owed_ask_unanswered" not in data and b"[REDACTED:env:SESSION_SECRET]" in data
    assert [line.seq for line in trace_files.read_trace(out)] == [3, 5, 12, 13, 14]


def test_a_time_no_calendar_holds_is_shown_as_a_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An adversarial review: a trace file whose events say `at` 10**20 ended `trace query` and `trace
    summary` with `internal: OSError ... (a bug in harness)`. Such a time is shown as `-`."""
    hostile = tmp_path / "hostile.ndjson"
    events = (
        {"type": "ask", "exchangeId": "q1", "teamId": "t", "at": 10**20, "memberId": "a", "to": "b"},
        {"type": "protocol_violation", "exchangeId": "q1", "memberId": "a", "rule": "r", "at": -(10**20)},
    )
    lines = (json.dumps({"source": "ledger", "seq": n, "event": e}) for n, e in enumerate(events, 1))
    hostile.write_text("".join(line + "\n" for line in lines))
    for view in ("query", "summary"):
        assert run(["trace", view, str(hostile)]) == 0
        shown = capsys.readouterr()
        assert "internal" not in shown.err and "q1" in shown.out, shown
