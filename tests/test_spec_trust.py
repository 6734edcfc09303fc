# The trust spec's tables are the code's: who may send which action, how peer text is shown, which programs
# count as plain shells. A change to a trust rule changes spec/trust-v1.md in the same commit, or this fails.
from __future__ import annotations

import codecs

import pytest

from harness.core.terminal_text import terminal_safe
from harness.io import remote, rpc
from harness.io.profiles import SHELLS
from tests.spec_tables import SPEC, read_table

TRUST = "trust-v1.md"
COLUMNS = ("owner", "member", "paired member", "paired owner")


def _code_rights(action: str) -> dict[str, str]:
    """What the code grants: owner-only actions need the owner token; a peer's frame never carries owner
    authority except for the observation actions; a subscription needs a connection to the owner's daemon."""
    spec = rpc.ACTIONS[action]
    open_to_all = action == "capabilities"
    member = open_to_all or not spec.owner_only
    crosses = action != "subscribe"
    observe = action in remote.OBSERVATION_ACTIONS or action == "capabilities"
    rights = {
        "owner": True,
        "member": member,
        "paired member": member and crosses,
        "paired owner": observe,
    }
    return {column: "yes" if allowed else "no" for column, allowed in rights.items()}


def test_team_actions_table_is_the_codes() -> None:
    rows = {
        row["action"]: {column: row[column] for column in COLUMNS}
        for row in read_table(TRUST, "team-actions")
    }
    assert set(rows) == set(rpc.ACTIONS)
    for action, rights in rows.items():
        assert rights == _code_rights(action), action


@pytest.mark.parametrize("row", read_table(TRUST, "terminal-text"), ids=lambda row: row["character"])
def test_terminal_text_table_is_the_function(row: dict[str, str]) -> None:
    example = codecs.decode(row["example"], "unicode_escape")
    shown = "\n" if row["shown as"] == "one line break" else row["shown as"]
    assert terminal_safe(f"a{example}b") == f"a{shown}b"


def test_every_principal_is_named() -> None:
    principals = [row["principal"] for row in read_table(TRUST, "principals")]
    expected = ["owner", "member", "other local user", "web page", "paired machine", "relay", "stranger"]
    assert principals == expected


def test_the_plain_shells_named_by_the_spec_are_the_codes() -> None:
    text = (SPEC / TRUST).read_text(encoding="utf-8")
    assert "`SHELLS`" in text
    for shell in ("bash", "sh", "zsh", "dash", "fish", "ksh", "tcsh"):
        assert shell in SHELLS
