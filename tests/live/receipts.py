# Receipts of a live team run, read from the records the run left (never from the screens alone):
# - the desk journal (this machine's delivery desk): every notice's submit, the one write it licensed, how
#   that write finished, and the agent turn it saw on it (`turn_observed`, which makes a notice `accepted`);
# - the owner's ledger journal: every delivery state the desk reported for each notice, in order;
# - each engine's fake model log: the turns the engine really took, with the exact text it was given.
# A notice's turn is attributed when exactly one turn of its engine carries exactly its text (as that engine
# takes a notice: Grok CLI on one line) and that turn began after the notice's write began.
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.io.profiles import notice_as_typed, squash

_KEY = re.compile(r"(--key\s+)\S+")


def redact(text: str) -> str:
    """A notice text without a member key (an introduction to a member on a paired machine carries one)."""
    return _KEY.sub(r"\1***", text)


@dataclass
class Turn:
    """One turn an engine took: the first model request on a new user message (not a tool-result step)."""

    at_ms: int
    prompt: str


@dataclass
class Receipt:
    notice_id: str
    kind: str
    agent_id: str
    text: str
    submitted_at: int = 0
    writes: list[int] = field(default_factory=list)  # write_started times
    results: list[str] = field(default_factory=list)  # write_finished results
    turns_observed: list[int] = field(default_factory=list)  # turn_observed times
    consumed: list[str] = field(default_factory=list)  # answer_retrieved / inbox_read
    states: list[str] = field(default_factory=list)  # as the owner recorded them, in order
    reasons: list[str] = field(default_factory=list)  # the reasons of the queued states, in order
    model_turns: list[Turn] = field(default_factory=list)  # the engine's turns on exactly this text

    def problems(self) -> list[str]:
        """Why this receipt is not: written exactly once, submitted, accepted on its own turn."""
        found = []
        if len(self.writes) != 1:
            found.append(f"{len(self.writes)} writes began (want exactly 1)")
        if self.results != ["ok"]:
            found.append(f"write results {self.results} (want ['ok'])")
        if len(self.turns_observed) != 1:
            found.append(f"{len(self.turns_observed)} turns observed by the desk (want 1)")
        if "accepted" not in self.states:
            found.append(f"never accepted; owner saw {self.states}")
        if len(self.model_turns) != 1:
            found.append(f"the engine took {len(self.model_turns)} turns on exactly this text (want 1)")
        elif self.writes and self.model_turns[0].at_ms < self.writes[0]:
            found.append("the engine's turn on it began before its write")
        return found

    def view(self) -> dict[str, Any]:
        accepted = [s for s in self.states if s == "accepted"]
        write = self.writes[0] if self.writes else None
        return {
            "noticeId": self.notice_id,
            "kind": self.kind,
            "agentId": self.agent_id,
            "text": redact(self.text),
            "states": _collapse(self.states),
            "queuedReasons": _collapse(self.reasons),
            "final": self.states[-1] if self.states else None,
            "writes": len(self.writes),
            "writeResults": self.results,
            "turnsObservedByDesk": len(self.turns_observed),
            "engineTurnsOnThisText": len(self.model_turns),
            "accepted": bool(accepted),
            "consumedBy": self.consumed,
            "submittedAt": self.submitted_at,
            "writeStartedAt": write,
            "engineTurnAt": self.model_turns[0].at_ms if self.model_turns else None,
            "turnObservedAt": self.turns_observed[0] if self.turns_observed else None,
            "msSubmitToWrite": None if write is None else write - self.submitted_at,
            "msWriteToAccepted": (
                None if write is None or not self.turns_observed else self.turns_observed[0] - write
            ),
        }


def _collapse(items: Sequence[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def engine_turns(log: Sequence[Mapping[str, Any]]) -> list[Turn]:
    """The turns in a fake model log: requests that offer the shell tool and start on a user message."""
    return [
        Turn(round(float(entry["at"]) * 1000), str(entry.get("prompt", "")))
        for entry in log
        if not entry.get("side")
        and entry.get("api") not in (None, "head", "unknown")
        and entry.get("steps") == 0
    ]


def receipts(
    desk: Sequence[Mapping[str, Any]],
    ledger: Sequence[Mapping[str, Any]],
    turns_by_agent: Mapping[str, Sequence[Turn]],
    engines: Mapping[str, str],
) -> dict[str, Receipt]:
    """Receipts of every notice the desk took, its turns looked for among its agent's (`engines`: the engine
    of each agent that has one)."""
    found: dict[str, Receipt] = {}
    for entry in desk:
        kind = entry.get("type")
        if kind == "submit":
            notice_id = str(entry["noticeId"])
            receipt = found.setdefault(
                notice_id, Receipt(notice_id, str(entry["kind"]), str(entry["agentId"]), str(entry["text"]))
            )
            receipt.submitted_at = int(entry["at"])
        elif kind in ("write_started", "write_finished", "turn_observed"):
            receipt = found[str(entry["noticeId"])]
            if kind == "write_started":
                receipt.writes.append(int(entry["at"]))
            elif kind == "write_finished":
                receipt.results.append(str(entry["result"]))
            else:
                receipt.turns_observed.append(int(entry["at"]))
        elif kind == "answer_retrieved":
            if str(entry["noticeId"]) in found:
                found[str(entry["noticeId"])].consumed.append("answer_retrieved")
        elif kind == "inbox_read":
            for notice_id in entry.get("noticeIds", []):
                if notice_id in found:
                    found[notice_id].consumed.append("inbox_read")
    for entry in ledger:
        if entry.get("type") == "record_delivery" and entry.get("noticeId") in found:
            receipt = found[str(entry["noticeId"])]
            receipt.states.append(str(entry["state"]))
            if entry["state"] == "queued" and entry.get("reason"):
                receipt.reasons.append(str(entry["reason"]))
    for receipt in found.values():
        engine = engines.get(receipt.agent_id)
        wanted = squash(receipt.text if engine is None else notice_as_typed(engine, receipt.text))
        receipt.model_turns = [
            t for t in turns_by_agent.get(receipt.agent_id, ()) if squash(t.prompt) == wanted
        ]
    return found
