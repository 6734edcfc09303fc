# Issue 19: core/commands.py at the core. The journal stores commands under these names, so each must be
# the name spec/team-v1.md gives it; and an ask notifies its asker unless told otherwise.
from __future__ import annotations

import re
from pathlib import Path

from harness.core import commands as c

SPEC = Path(__file__).resolve().parent.parent / "spec" / "team-v1.md"


def _spec_command_names() -> list[str]:
    """The commands section's table: its first column names one or more commands, as `pause`, `resume`."""
    text = SPEC.read_text(encoding="utf-8")
    table = text[text.index("| command | fields | who |") :].split("\n\n")[0].splitlines()[2:]
    return [name for row in table for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])]


def test_the_journal_names_of_the_commands_are_the_specs() -> None:
    assert list(c.COMMAND_NAMES.values()) == _spec_command_names()
    assert list(c.COMMAND_NAMES) == list(c.TEAM_COMMANDS)


def test_an_ask_notifies_and_everything_optional_is_absent_by_default() -> None:
    ask = c.Ask(1, "t1", "q1", "bob", "why?")
    assert ask.notify is True
    assert (ask.context, ask.ttl_ms, ask.parent_id, ask.from_, ask.member_key) == (None,) * 5
    reply = c.Reply(1, "t1", "q1", "because")
    assert (reply.evidence, reply.member_id, reply.member_key) == ((), None, None)
    assert c.CreateTeam(1, "t1", "team").members == ()
    owner_only = (c.PauseTeam(1, "t1"), c.Expire(1, "t1", "q1", "no_answer"), c.Tick(1, "t1"))
    assert [command.member_key for command in owner_only] == [None] * 3  # the owner omits its key
    assert (c.Cancel(1, "t1", "q1").reason, c.RecordDelivery(1, "t1", "n", "queued").reason) == (None, None)
