# A file of the data directory damaged into a document nested deeper than the JSON parser recurses (100,000
# `[`): every reader turns it into its own one-line error, as it does for any other damage, instead of ending
# the command with a RecursionError traceback (core/bounded_json.py `parse_own`).
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.io import channel_setting, pairing, session_files
from harness.io import home as homes
from harness.io.agents import REGISTRY_FILE, AgentRegistry
from harness.io.ledger_runner import LIMITS_ENV, limits_from_env

DEEP = "[" * 100_000


def _daemon_info(home: Path) -> object:
    (home / homes.DAEMON_FILE).write_text(DEEP)
    return homes.read_daemon_info(home)


def _deleted_teams(home: Path) -> object:
    (home / homes.DELETED_FILE).write_text(DEEP)
    return homes.deleted_teams(home)


def _peers(home: Path) -> object:
    (pairing.remote_dir(home) / pairing.PEERS_FILE).write_text(DEEP)
    return pairing.peers(home)


def _channel_setting(home: Path) -> object:
    (home / channel_setting.SETTING_FILE).write_text("[" * 4000)  # within its size bound, past the parser
    return channel_setting.read_setting(home)


def _session_status(home: Path) -> object:
    directory = session_files.session_dir(home, "s1")
    directory.mkdir(parents=True)
    (directory / session_files.STATUS_FILE).write_text(DEEP)
    return session_files.read_status(home, "s1")


@pytest.mark.parametrize(
    ("read", "error"),
    [
        (_daemon_info, homes.HomeError),
        (_deleted_teams, homes.HomeError),
        (_peers, homes.HomeError),
        (_channel_setting, channel_setting.SettingError),
        (_session_status, session_files.StatusUnreadable),
    ],
)
def test_a_file_nested_past_the_parser_is_damage_with_its_readers_error(
    tmp_path: Path, read: Callable[[Path], object], error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        read(tmp_path)
    assert "nested deeper" in str(raised.value) and "\n" not in str(raised.value)


def test_a_registry_nested_past_the_parser_is_unavailable_not_empty(tmp_path: Path) -> None:
    """A damaged agents.json is never read as a machine without agents (that would retire every channel
    member): the registry says why it is unavailable and keeps the file for repair."""
    (tmp_path / REGISTRY_FILE).write_text(DEEP)
    registry = AgentRegistry.load(tmp_path)
    assert registry.unavailable is not None and "nested deeper" in registry.unavailable
    assert (tmp_path / REGISTRY_FILE).read_text() == DEEP


def test_limits_nested_past_the_parser_are_a_value_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LIMITS_ENV, DEEP)
    with pytest.raises(ValueError, match="nested deeper"):
        limits_from_env()
