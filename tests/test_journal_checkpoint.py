# Issue 18: a checkpoint whose payload is a callable is made in a worker thread (the desk's, a few hundred
# milliseconds at its bound), encoded a slice at a time so the event loop's thread gets the GIL in between,
# into exactly the bytes a one-call encoding gives. Appends go on meanwhile and land after the checkpoint.
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from harness.io.journal import JournalStore
from harness.io.journal_files import encode_record
from tests.journal_support import bodies, state

DEADLINE = 60.0

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=4)
members = st.integers(0, 3) | st.integers(125, 131) | st.sampled_from([256, 257, 300])
big_dicts = members.flatmap(lambda n: st.fixed_dictionaries({f"k{i}": scalars for i in range(n)}))
big_lists = members.flatmap(lambda n: st.lists(scalars, min_size=n, max_size=n))
int_keyed = st.dictionaries(st.integers(), scalars, min_size=120, max_size=140)  # JSON makes keys strings


@given(st.dictionaries(st.text(max_size=5), scalars | big_dicts | big_lists | int_keyed, max_size=4))
def test_a_record_made_in_slices_is_the_same_bytes(body: dict[str, Any]) -> None:
    assert encode_record("payload", 7, body, yielding=True) == encode_record("payload", 7, body)


async def test_a_callable_checkpoint_is_made_in_a_thread_while_appends_go_on(tmp_path: Path) -> None:
    store, _ = await JournalStore.open(tmp_path / "s")
    for n in range(3):
        await store.append({"n": n})
    making, release = threading.Event(), threading.Event()

    def payload() -> dict[str, object]:
        assert threading.current_thread() is not threading.main_thread()
        making.set()
        assert release.wait(DEADLINE)
        return {"items": [{"n": n} for n in range(3)]}

    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.checkpoint, 3, payload)
        with trio.fail_after(DEADLINE):
            while not making.is_set():
                await trio.sleep(0.005)
            assert [await store.append({"n": n}) for n in range(3, 6)] == [4, 5, 6]
        release.set()
    assert store.checkpoint_seq == 3
    await store.append({"n": 6})
    await store.aclose()

    _, recovery = await JournalStore.open(tmp_path / "s")
    assert recovery.checkpoint_seq == 3 and [e.seq for e in recovery.entries] == [4, 5, 6, 7]
    assert state(recovery) == [{"n": n} for n in range(7)] and bodies(recovery)[0] == {"n": 3}


async def test_a_payload_that_cannot_be_encoded_writes_nothing_and_stops_nothing(tmp_path: Path) -> None:
    store, _ = await JournalStore.open(tmp_path / "s")
    await store.append({"n": 0})
    with pytest.raises(TypeError):
        await store.checkpoint(1, lambda: {"items": {0}})  # a set is not JSON
    assert store.checkpoint_seq == 0 and store.failed is None
    await store.checkpoint(1, lambda: {"items": [{"n": 0}]})
    await store.aclose()
    _, recovery = await JournalStore.open(tmp_path / "s")
    assert recovery.checkpoint_seq == 1 and state(recovery) == [{"n": 0}]
