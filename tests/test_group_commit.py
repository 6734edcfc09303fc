# Group commit (issue 18): the ledger steps every command that arrived in one turn and appends them as one
# batch, the desk takes the requests of one ledger batch as one batch, and looks at terminals that set nothing
# off ride the next durable append. What must hold is the old promise: an acknowledged ask survives SIGKILL,
# and nothing (a notice typed, an answer) leaves before the record that causes it is durable. Run as a module,
# this file is a daemon whose ledger stalls forever inside a group commit once armed; as a test, it kills it.
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import attrs
import trio

from harness.core.limits import DEFAULT_LIMITS
from harness.io import home as homes
from harness.io.client import Client, ClientError
from harness.io.daemon import Daemon
from harness.io.desk_runner import replay_desk
from harness.io.fileops import FileOps
from harness.io.journal import CheckpointPolicy, JournalStore
from harness.io.journal_files import TEMP_SUFFIX, delivery_store_dir, ledger_store_dir, scan_store
from harness.io.ledger_runner import replay
from harness.io.terminal_port import Licence, ScreenState, WriteOutcome
from tests.test_desk_runner import TIMING, FakeTerminals, local_team

BURST = attrs.evolve(
    DEFAULT_LIMITS,
    pending_per_sender=1_000,
    asks_per_minute=100_000,
    queued_per_agent=1_000,
    write_settle_ms=20,
)
CLIENTS = 8
ASKS = 40  # per client: 320 in all, within a team's 500 exchanges
ARM_AFTER = 24  # acknowledged asks before the next group commit of the ledger stalls


class CountingOps(FileOps):
    def __init__(self) -> None:
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)


async def test_append_all_is_one_fsync_and_enqueued_entries_ride_the_next(tmp_path: Path) -> None:
    ops = CountingOps()
    store, _ = await JournalStore.open(tmp_path / "s", ops=ops)
    before = ops.fsyncs
    assert await store.append_all([{"n": 1}, {"n": 2}, {"n": 3}]) == [1, 2, 3]
    first_segment = ops.fsyncs - before  # a new segment: the file and its directory
    store.enqueue([{"n": 4}, {"n": 5}])
    assert scan_store(tmp_path / "s", FileOps()).recovery.last_seq == 5  # written at once, not fsynced
    assert store.durable_seq == 3 and ops.fsyncs - before == first_segment
    assert await store.append({"n": 6}) == 6
    assert ops.fsyncs - before == first_segment + 1  # 4, 5 and 6 shared one fsync
    store.enqueue([{"n": 7}])
    await store.aclose()  # writes what is queued
    entries = scan_store(tmp_path / "s", FileOps()).recovery.entries
    assert [(e.seq, e.body["n"]) for e in entries] == [(n, n) for n in range(1, 8)]


async def test_a_journal_that_grows_by_riding_entries_is_checkpointed_at_one(tmp_path: Path) -> None:
    """Riding entries count toward the checkpoint policy, and a checkpoint at an enqueued entry first makes
    the journal durable up to it: a journal that grows only by entries that ride (the ledger's reports of its
    own desk, the desk's looks) is checkpointed as often as any, so a restart never replays more than the
    policy's count. Before, only durable appends counted and only their seqs could be checkpointed: such a
    tail was replayed whole at every restart (93,000 ledger steps at the seed's bounds)."""
    ops = CountingOps()
    policy = CheckpointPolicy(every=10)
    store, _ = await JournalStore.open(tmp_path / "s", ops=ops)
    assert await store.append({"n": 1}) == 1
    seqs = [seq for n in range(2, 12) for seq in store.enqueue([{"n": n}])]
    assert seqs == list(range(2, 12)) and store.durable_seq == 1 and store.journaled_seq == 11
    assert policy.due(store)
    before = ops.fsyncs
    await store.checkpoint(11, {"state": 11})
    assert store.durable_seq == 11 and store.checkpoint_seq == 11 and ops.fsyncs > before
    assert not policy.due(store)
    await store.aclose()
    recovery = scan_store(tmp_path / "s", FileOps()).recovery
    assert (recovery.checkpoint_seq, recovery.checkpoint, recovery.entries) == (11, {"state": 11}, ())


class CheckpointOrder(FileOps):
    """Notes the store's durable seq each time a checkpoint's temp file is created."""

    def __init__(self) -> None:
        self.store: JournalStore | None = None
        self.durable_at_checkpoint: list[int] = []

    def create_exclusive(self, path: Path) -> int:
        if path.name.endswith(TEMP_SUFFIX) and self.store is not None:
            self.durable_at_checkpoint.append(self.store.durable_seq)
        return super().create_exclusive(path)


async def test_a_checkpoint_never_runs_ahead_of_the_durable_journal(tmp_path: Path) -> None:
    """Entries enqueued just after a checkpoint rotated the segment are not written at once (no segment is
    open); a checkpoint at them first makes them durable, so the checkpoint file is never written while the
    journal's durable end is behind the seq it covers."""
    ops = CheckpointOrder()
    store, _ = await JournalStore.open(tmp_path / "s", ops=ops)
    ops.store = store
    assert await store.append({"n": 1}) == 1
    await store.checkpoint(1, {"state": 1})  # rotates: the next entries start a new segment
    assert store.enqueue([{"n": 2}, {"n": 3}]) == [2, 3] and store.durable_seq == 1
    await store.checkpoint(3, {"state": 3})
    assert ops.durable_at_checkpoint == [1, 3]
    await store.aclose()
    recovery = scan_store(tmp_path / "s", FileOps()).recovery
    assert (recovery.checkpoint_seq, recovery.checkpoint, recovery.entries) == (3, {"state": 3}, ())


async def test_what_enqueue_wrote_survives_a_checkpoint_that_rotates_its_segment(tmp_path: Path) -> None:
    """An entry `enqueue` wrote (not fsynced) into the current segment is made durable there before a
    checkpoint rotates and compacts that segment: never deleted with it, never written again in the next."""
    store, _ = await JournalStore.open(tmp_path / "s", ops=CountingOps())
    assert await store.append_all([{"n": 1}, {"n": 2}, {"n": 3}]) == [1, 2, 3]
    store.enqueue([{"n": 4}])
    await store.checkpoint(3, {"state": 3})
    assert store.durable_seq == 4
    assert await store.append({"n": 5}) == 5
    await store.aclose()
    recovery = scan_store(tmp_path / "s", FileOps()).recovery
    assert (recovery.checkpoint_seq, recovery.checkpoint) == (3, {"state": 3})
    assert [(e.seq, e.body["n"]) for e in recovery.entries] == [(4, 4), (5, 5)]


class TypingTerminals(FakeTerminals):
    """Bob's idle terminal, recording every pasted notice in a file as it is pasted."""

    def __init__(self, typed: Path) -> None:
        super().__init__({"agent-alice": ScreenState.BUSY, "agent-bob": ScreenState.IDLE})
        self.typed = typed.open("a", buffering=1)

    async def write(self, agent_id: str, text: str, licence: Licence | None = None) -> WriteOutcome:
        outcome = await super().write(agent_id, text, licence)
        if outcome is WriteOutcome.OK:
            self.typed.write(json.dumps(text) + "\n")
        return outcome


async def _doomed_daemon(home: Path) -> None:
    work = home.parent
    write = JournalStore._write_blocking

    def stalling(store: JournalStore, fd: int | None, data: bytes) -> int:
        """Once armed, the ledger's next batch of two or more entries never reaches the disk."""
        if store.directory.parent.name == "ledgers" and data.count(b"\n") >= 2 and (work / "armed").exists():
            (work / "in-flight").write_bytes(data)
            threading.Event().wait()  # SIGKILL arrives here
        return write(store, fd, data)

    JournalStore._write_blocking = stalling  # type: ignore[method-assign]
    terminals = TypingTerminals(work / "typed.jsonl")
    daemon = Daemon(
        home, limits=BURST, log=lambda line: None, terminals=lambda r: terminals, runner_timing=TIMING
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        _, keys = await local_team(daemon)
        publish_keys(work, keys)
        await trio.sleep_forever()


def publish_keys(work: Path, keys: dict[str, str]) -> None:
    """The child daemon's member keys for the test that started it, whole or not at all: written beside and
    renamed, so the test never reads a file the child has created but not yet filled."""
    partial = work / "keys.json.partial"
    partial.write_text(json.dumps(keys))
    partial.rename(work / "keys.json")


async def published_keys(work: Path, child: subprocess.Popen[bytes], wait: float) -> dict[str, str]:
    """The keys the child daemon published once its team was made."""
    with trio.fail_after(wait):
        while not (work / "keys.json").exists():
            assert child.poll() is None, "the daemon died before its team was made"
            await trio.sleep(0.02)
    keys: dict[str, str] = json.loads((work / "keys.json").read_text())
    return keys


def _asker(socket: Path, key: str, client: int, acked: list[str]) -> None:
    try:
        with Client(socket) as connection:
            for n in range(ASKS):
                question = f"k{client}-{n}"
                fields = {"id": question, "to": "bob", "text": f"Which port? token {question} end"}
                connection.request("ask", team_id="t1", member_key=key, fields=fields, timeout=60)
                acked.append(question)
    except ClientError:
        pass  # the daemon was killed: this ask was never acknowledged


def _typed_tokens(typed: Path) -> set[str]:
    """The asks whose notice was typed so far (whole lines only: the doomed daemon may be mid-line)."""
    lines = typed.read_text().split("\n")[:-1] if typed.exists() else []
    texts = (json.loads(line) for line in lines)
    return {text.split("token ", 1)[1].split(" ", 1)[0] for text in texts if "token " in text}


def _asked_in(data: bytes) -> set[str]:
    entries = (json.loads(line)["entry"] for line in data.splitlines())
    return {str(entry["id"]) for entry in entries if entry.get("type") == "ask"}


async def test_sigkill_inside_a_group_commit_keeps_every_acknowledged_ask_and_types_no_absent_one(
    tmp_path: Path,
) -> None:
    """Every acknowledged ask is in the ledger after SIGKILL, the asks of the group commit the kill cut off
    were never acknowledged, and no notice was typed (or is held by the desk to be typed) for an ask the
    ledger does not hold."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    child = subprocess.Popen([sys.executable, "-m", "tests.test_group_commit", str(home)], cwd=Path.cwd())
    acked: list[str] = []
    try:
        alice = (await published_keys(tmp_path, child, 60))["alice"]
        socket = home / homes.SOCKET_FILE
        askers = [
            threading.Thread(target=_asker, args=(socket, alice, n, acked), daemon=True)
            for n in range(CLIENTS)
        ]
        for asker in askers:
            asker.start()
        with trio.fail_after(60):
            # The desk types while the ledger commits: arm once it typed a question, or nothing is checked.
            while len(acked) < ARM_AFTER or not _typed_tokens(tmp_path / "typed.jsonl"):
                assert child.poll() is None, "the daemon died before it was armed"
                await trio.sleep(0.005)
            (tmp_path / "armed").write_text("")
            while not (tmp_path / "in-flight").exists():
                assert child.poll() is None, "the daemon died before a group commit"
                assert any(asker.is_alive() for asker in askers), "every ask answered before a group commit"
                await trio.sleep(0.005)
            await trio.sleep(0.2)  # whatever else the daemon would do meanwhile, it may do
    finally:
        child.kill()  # SIGKILL: no shutdown path runs
        child.wait(10)
    for asker in askers:
        asker.join(70)

    in_flight = _asked_in((tmp_path / "in-flight").read_bytes())
    ledger = scan_store(ledger_store_dir(home, "t1"), FileOps()).recovery
    team, _ = replay("t1", ledger, BURST)
    assert team is not None
    assert len(acked) >= ARM_AFTER
    missing = [question for question in acked if question not in team.exchanges]
    assert not missing, f"acknowledged asks lost: {missing}"
    assert not in_flight & set(acked), "an ask was acknowledged before its group commit was durable"
    assert not in_flight & set(team.exchanges), "the stalled batch was never written"

    tokens = _typed_tokens(tmp_path / "typed.jsonl")
    assert tokens, "no notice was typed before the kill: the test saw nothing"
    assert tokens <= set(team.exchanges), f"typed for absent asks: {sorted(tokens - set(team.exchanges))}"
    desk_journal = scan_store(delivery_store_dir(home), FileOps()).recovery
    desk = replay_desk(homes.machine_id(home), desk_journal, BURST)
    held = {notice.subject_id for notice in desk.notices.values() if notice.team_id == "t1"}
    assert held - {member.id for member in team.members.values()} <= set(team.exchanges)


if __name__ == "__main__":
    trio.run(_doomed_daemon, Path(sys.argv[1]))
