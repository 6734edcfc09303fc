# The tab channels' setting (spec/channels-v1.md): one small file in the data directory that `harness channels
# enable|disable|status` read and write whether or not a daemon runs, and the daemon's keeper reads on every
# pass. Kept apart from the keeper so that those commands start without trio, tmux or the agent registry.
from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.core import channels as ch
from harness.core.bounded_json import parse_own
from harness.io import home as homes

SETTING_FILE = "channels.json"
FORMAT_VERSION = 1
MAX_SETTING_BYTES = 4_096  # the file holds three fields; anything larger is not ours


class SettingError(Exception):
    """The settings file is damaged; it is kept as it is and reported, never taken for `off`."""


def read_setting(home: Path) -> ch.Setting:
    path = home / SETTING_FILE
    try:  # non-blocking and regular files only: a FIFO put in its place must not stop the daemon's loop
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return ch.OFF
    except OSError as error:
        raise SettingError(f"{path} cannot be read ({error.strerror or error})") from None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        raw = os.read(fd, MAX_SETTING_BYTES + 1) if regular else b""
    finally:
        os.close(fd)
    try:
        if not regular:
            raise ValueError("not a regular file")
        if len(raw) > MAX_SETTING_BYTES:
            raise ValueError(f"larger than {MAX_SETTING_BYTES} bytes")
        data = parse_own(raw)
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ValueError(f"expected an object with version {FORMAT_VERSION}")
        enabled, epoch = data.get("enabled"), data.get("epoch")
        if type(enabled) is not bool or type(epoch) is not int or not 0 <= epoch < 2**31:
            raise ValueError("'enabled' must be true or false and 'epoch' a small whole number")
    except ValueError as error:
        raise SettingError(f"{path} is damaged ({error}); delete it to reset channels to off") from None
    return ch.Setting(enabled, epoch)


def write_setting(home: Path, setting: ch.Setting) -> None:
    """Atomically replace the setting (temp, fsync, rename, fsync directory), mode 0600."""
    data = {"version": FORMAT_VERSION, "enabled": setting.enabled, "epoch": setting.epoch}
    homes.write_private_json(home / SETTING_FILE, data)
