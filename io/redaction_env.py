# The io half of redaction (core/redaction.py is pure): read the process environment and the data directory's
# own secrets, and say once per run, on stderr, when redaction was switched off, since a trace written then
# may hold credentials and whoever later shares it must have been told.
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from harness.core import redaction
from harness.io import home as homes

WARNING = (
    f"warning: {redaction.DISABLED_VARIABLE}=1: redaction is off; traces, logs and exports written by this "
    "run may hold credentials (never set it on CI for a public repository)\n"
)

_warned = False
_warned_lock = threading.Lock()


def home_secrets(home: Path | None) -> tuple[list[str], list[str]]:
    """The member keys and the owner token kept in `home` (none when it is absent or unreadable), so their
    values are redacted wherever they appear, beyond what the shape rules reach."""
    if home is None:
        return [], []
    keys: list[str] = []
    for path in sorted((home / homes.KEYS_DIR).glob(f"*/*{homes.KEY_SUFFIX}")):
        try:
            keys.append(homes.read_member_key(path))
        except homes.HomeError:
            continue
    token = homes.read_owner_token(home) if (home / homes.TOKEN_FILE).is_file() else None
    return keys, [token] if token else []


def from_environment(
    home: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    stderr: TextIO | None = None,
) -> redaction.Redactor:
    """This run's redactor: the allowlisted variables of the environment and `home`'s own secrets, or no
    redaction (with exactly one warning on stderr per run) when HARNESS_REDACTION_DISABLED=1."""
    global _warned
    environ = os.environ if environ is None else environ
    if redaction.disabled(environ):
        with _warned_lock:
            first, _warned = not _warned, True
        if first:
            (stderr or sys.stderr).write(WARNING)
        return redaction.DISABLED
    member_keys, owner_tokens = home_secrets(home)
    return redaction.redactor(environ, member_keys=member_keys, owner_tokens=owner_tokens)
