# Pairing through a real relay: one-time codes (used twice, expired or with a wrong secret: refused with a
# clear reason), both machines keep each other's identity in 0600 files, list and remove.
from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from harness.io import pairing
from harness.io.relay import Relay
from harness.io.remote import RemoteNode


@asynccontextmanager
async def owner_online(tmp_path: Path) -> AsyncIterator[tuple[Path, Path, str]]:
    """A relay, machine A's node on it, and machine B's (offline) home."""
    home_a, home_b = tmp_path / "a", tmp_path / "b"
    async with trio.open_nursery() as nursery:
        relay = Relay()
        port = await nursery.start(relay.serve, 0)
        url = f"ws://127.0.0.1:{port}"
        node = RemoteNode(home_a, relay_url=url, log=lambda line: None)
        await nursery.start(node.run)
        await node.wait_connected()
        yield home_a, home_b, url
        nursery.cancel_scope.cancel()


async def test_pair_list_remove(tmp_path: Path) -> None:
    async with owner_online(tmp_path) as (home_a, home_b, url):
        code = pairing.create_code(home_a, url)
        text = code.text()
        assert text.startswith("hpair1.") and " " not in text and len(text) < 200
        assert pairing.parse_code(text) == code
        peer_a = await pairing.accept_code(home_b, text)
    a_id, b_id = pairing.homes.machine_id(home_a), pairing.homes.machine_id(home_b)
    assert peer_a.machine_id == a_id and peer_a.public_key == pairing.identity(home_a).public
    assert list(pairing.peers(home_b)) == [a_id]
    assert list(pairing.peers(home_a)) == [b_id]
    assert pairing.peers(home_a)[b_id].public_key == pairing.identity(home_b).public
    assert pairing.relay_url(home_b) == url  # B adopted the code's relay
    for home in (home_a, home_b):
        for name in ("peers.json", "pairing.json", "identity.key", "relay.json"):
            path = home / "remote" / name
            if path.exists():
                assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
        assert stat.S_IMODE(os.stat(home / "remote").st_mode) == 0o700
    assert pairing.find_peer(home_b, peer_a.address) == peer_a
    assert pairing.remove_peer(home_b, a_id) == peer_a
    assert pairing.peers(home_b) == {}
    assert pairing.remove_peer(home_b, a_id) is None


async def test_code_used_twice_is_refused(tmp_path: Path) -> None:
    async with owner_online(tmp_path) as (home_a, home_b, url):
        text = pairing.create_code(home_a, url).text()
        await pairing.accept_code(home_b, text)
        with pytest.raises(pairing.PairingError) as caught:
            await pairing.accept_code(tmp_path / "c", text)
    assert caught.value.code == pairing.CODE_USED
    assert "already used" in caught.value.detail
    assert len(pairing.peers(home_a)) == 1


async def test_expired_code_is_refused_locally_and_by_the_owner(tmp_path: Path) -> None:
    async with owner_online(tmp_path) as (home_a, home_b, url):
        old = pairing.create_code(home_a, url, ttl=60, now=0)
        with pytest.raises(pairing.PairingError) as caught:
            await pairing.accept_code(home_b, old.text())
        assert caught.value.code == pairing.CODE_EXPIRED
        # The joiner's clock says "fine" but the owner's record has expired: the owner refuses.
        fresh = pairing.create_code(home_a, url)
        codes_path = home_a / "remote" / pairing.CODES_FILE
        codes = json.loads(codes_path.read_text())
        codes[fresh.code_id.hex()]["expiresAt"] = 1
        pairing.homes.write_private_json(codes_path, codes)
        with pytest.raises(pairing.PairingError) as caught:
            await pairing.accept_code(home_b, fresh.text())
        assert caught.value.code == pairing.CODE_EXPIRED
    assert pairing.peers(home_a) == {} and pairing.peers(home_b) == {}


async def test_wrong_secret_is_refused(tmp_path: Path) -> None:
    async with owner_online(tmp_path) as (home_a, home_b, url):
        code = pairing.create_code(home_a, url)
        forged = attrs.evolve(code, secret=bytes(16))
        with pytest.raises(pairing.PairingError) as caught:
            await pairing.accept_code(home_b, forged.text())
        assert caught.value.code == pairing.BAD_SECRET
        # The code itself was not burnt by a wrong guess.
        await pairing.accept_code(home_b, code.text())
    assert list(pairing.peers(home_b)) == [pairing.homes.machine_id(home_a)]


async def test_owner_offline_and_damaged_code(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        relay = Relay()
        port = await nursery.start(relay.serve, 0)
        code = pairing.create_code(tmp_path / "a", f"ws://127.0.0.1:{port}")
        with pytest.raises(pairing.PairingError) as caught:
            await pairing.accept_code(tmp_path / "b", code.text())
        assert caught.value.code == pairing.OFFLINE
        with pytest.raises(pairing.PairingError, match="bad_code"):
            await pairing.accept_code(tmp_path / "b", code.text()[:-30])
        nursery.cancel_scope.cancel()


async def test_each_pairing_has_its_own_bond_and_frames_of_another_never_open(tmp_path: Path) -> None:
    from harness.io.seal import ReceiveSession, SealError, SendSession

    bonds = []
    async with owner_online(tmp_path) as (home_a, home_b, url):
        for _ in range(2):  # the same two machines, paired twice
            await pairing.accept_code(home_b, pairing.create_code(home_a, url).text())
            a_side = pairing.peers(home_a)[pairing.homes.machine_id(home_b)]
            b_side = pairing.peers(home_b)[pairing.homes.machine_id(home_a)]
            assert a_side.bond == b_side.bond and len(a_side.bond) == 32  # both derive it from the code
            assert "bond" not in a_side.view()  # `pair list` shows identities, never the pairing's secret
            bonds.append(a_side.bond)
    assert bonds[0] != bonds[1]
    a, b = pairing.identity(home_a), pairing.identity(home_b)
    earlier = SendSession(tmp_path / "old.send", a, b.public, bond=bonds[0]).seal(b"from the first pairing")
    receiver = ReceiveSession(tmp_path / "new.recv", b, a.public, bond=bonds[1])
    with pytest.raises(SealError) as refused:
        receiver.open(earlier)  # a relay replaying a frame recorded before the machines paired again
    assert refused.value.reason == "forged" and receiver.hwm == 0
    current = SendSession(tmp_path / "new.send", a, b.public, bond=bonds[1]).seal(b"this pairing")
    assert receiver.open(current) == b"this pairing"
