# The CLI's daemon process starts with the cyclic garbage collector off and freezes what the start built
# (io/daemon.py `collection_paused`): at the seed's bounds a start allocates about a million immutable
# records, and collections during it cost a quarter of the ledger's recovery (scripts/bench_restart.py).
# What must hold: the collector is on again afterwards, whether the start succeeded or failed.
from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from harness.io.daemon import collection_paused


@pytest.fixture
def unfrozen() -> Iterator[None]:
    assert gc.isenabled()
    yield
    gc.unfreeze()  # what this test froze goes back to the collector of the test process
    gc.enable()


def test_the_start_runs_without_collections_and_what_it_built_is_frozen(unfrozen: None) -> None:
    with collection_paused():
        assert not gc.isenabled()
        built = [[n] for n in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(built)


def test_a_start_that_fails_leaves_the_collector_on(unfrozen: None) -> None:
    with pytest.raises(OSError), collection_paused():
        raise OSError("the data directory is locked")
    assert gc.isenabled()
