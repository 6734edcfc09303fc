# The seam between the daemon's delivery desk and real terminals. The desk (a pure reducer) decides *whether*
# a notice may be written; something must look at screens and paste. The daemon's desk runner drives this
# port; `harness.io.tmux` implements it over tmux and engine profiles; tests implement it with scripted
# screens. Keeping it this small is what lets the same runner drive tmux, a fake TUI, or a remote machine.
from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

import attrs


class ScreenState(enum.StrEnum):
    IDLE = "idle"
    BUSY = "busy"
    DRAFT = "draft"
    DIALOG = "dialog"
    OFFLINE = "offline"
    STARTING = "starting"  # the engine is not ready yet, or the profile is unsure: never a licence to write
    # An idle screen that has not held still long enough yet (a fresh attach or restart, a draft that just
    # left the composer): not busy, and not yet a licence to write either.
    SETTLING = "settling"


class WriteOutcome(enum.StrEnum):
    OK = "ok"  # pasted, Enter sent, and the prompt visibly took it
    FAILED = "failed"  # nothing reached the terminal (no byte was sent), licensed or not
    UNCERTAIN = "uncertain"  # bytes may have reached it but the submit could not be confirmed


@attrs.frozen
class Screen:
    """What an engine profile made of one capture of an agent's pane."""

    state: ScreenState
    at_ms: int  # when the capture was taken (the daemon's clock, ms since the epoch)
    evidence: tuple[str, ...] = ()  # the lines that decided the state
    text: str = ""  # the plain capture, used to recognise the agent's turn on a written notice
    prompt: str | None = None  # what the composer holds ("" empty, None not found): a crash leftover is named


# The write boundary: told the last look before the paste, it says whether the paste may go ahead (the desk
# durably accepted the write on exactly that look). Nothing is sent unless it returns True.
Licence = Callable[[Screen], Awaitable[bool]]


class Terminals(Protocol):
    """The local agent terminals as the desk runner needs them. Implementations never send interrupt or
    cancel keys, never clear or edit a draft, and never retry a write."""

    def agents(self) -> Sequence[str]:
        """The agent ids this machine can currently reach."""
        ...

    async def observe(self, agent_id: str) -> Screen:
        """Capture and classify the agent's screen now (OFFLINE if the pane is gone)."""
        ...

    async def write(self, agent_id: str, text: str, licence: Licence | None = None) -> WriteOutcome:
        """Look at the pane once more (the write boundary) and, only if that look is idle and `licence` (when
        given) accepts it, paste `text` as one bracketed paste, press Enter once, confirm the submit. A look
        that is not idle, or a refused licence, sends nothing: FAILED. The desk runner asks once per due
        write; `licence` returns True at most once per notice (when the desk durably accepted its
        WriteStarted on that look)."""
        ...

    async def turn_matches(self, agent_id: str, text: str) -> bool:
        """Whether the agent's screen shows a turn on this written text (input accepted; not an answer)."""
        ...


@runtime_checkable
class Transcripts(Protocol):
    """Terminals whose whole history can be read: where the owner's inspection of an unconfirmed notice
    looks for evidence that it landed. A read only; never a key."""

    async def transcript(self, agent_id: str) -> str | None:
        """The pane's whole scrollback and screen as plain text (wrapped lines joined), or None when the
        agent has no pane here."""
        ...
