# The CLI's daemon process starts with the cyclic garbage collector off and freezes what the start built once
# it listens (io/daemon.py `collection_paused`): at the seed's bounds a start allocates about a million
# immutable records, and collections during it cost a quarter of the ledger's recovery
# (scripts/bench_restart.py). What must hold: the collector runs again afterwards, whether the daemon came to
# listen, failed, or was stopped by a signal before it listened, and a stop is clean either way.
from __future__ import annotations

import gc
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from harness.io.daemon import Daemon, collection_paused, serve_until_signalled
from harness.io.ledger_runner import LedgerRunner


@pytest.fixture
def unfrozen() -> Iterator[None]:
    assert gc.isenabled()
    yield
    gc.unfreeze()  # what a test froze goes back to the collector of the test process
    gc.enable()


def test_the_start_runs_without_collections_and_what_it_built_is_frozen_once_listening(
    unfrozen: None,
) -> None:
    with collection_paused() as listening:
        assert not gc.isenabled()
        built = [[n] for n in range(1000)]
        listening.started()
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(built)
    assert gc.isenabled()


def test_a_start_that_fails_leaves_the_collector_on(unfrozen: None) -> None:
    with pytest.raises(OSError), collection_paused():
        raise OSError("the data directory is locked")
    assert gc.isenabled()


async def test_a_signal_before_the_daemon_listens_stops_it_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unfrozen: None
) -> None:
    """`harness daemon run` stopped by SIGTERM while it recovers its ledgers ends as a stop, not a failure."""
    recover = LedgerRunner.recover
    daemon = Daemon(tmp_path / "home", log=lambda line: None)

    async def signalled_recover(runner: LedgerRunner) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # taken by the daemon's own signal receiver
        while not daemon._stop_requested:  # the receiver has stopped the daemon, still recovering
            await trio.sleep(0.01)
        await recover(runner)

    monkeypatch.setattr(LedgerRunner, "recover", signalled_recover)
    with trio.fail_after(60):
        await serve_until_signalled(daemon)
    assert gc.isenabled()
    assert not daemon.socket_path.exists(), "it listened after it was stopped"
