# A hostile paired machine (issue 15): it is paired with the destination the honest owner reaches through
# the relay, and it hands that destination's desk whatever it likes, at any step: notices for an agent that
# no team of it holds, notices for a member of the honest owner's team, an introduction into that team,
# steering of that team, and the honest owner's own requests that it saw on the relay, re-sent as its own.
# (It cannot open or re-seal another machine's frames; granting it their contents makes it stronger than it
# is, never weaker.) Its own frames need no replay of their own: it may send any request at any step under
# whichever pairing it holds, so a replayed frame that opens is one more of these, and one that does not
# open changes nothing.
#
# Only the destination's grant (core/remote_grant.py `admit`, which models/world.py runs on every arrival at
# a remote desk) stands between these requests and the desk; models/world.py's properties judge what reached
# a terminal and what changed at the desk.
from __future__ import annotations

from collections.abc import Iterable

import attrs

from harness.core import delivery as d
from harness.core.effects import notice_id
from harness.core.records import NoticeKind
from harness.core.system import OWNER_REQUESTS, OwnerRequest

from .link import Command, describe_command


@attrs.frozen
class HostilePeer:
    machine: str = "mach2"
    team: str = "h"  # a team of its own: the first notice of it the destination admits binds it there
    # It also introduces an agent there as a member of its own team and asks it a question: its grant, which
    # the destination must honour without letting it reach the honest owner's notices.
    own_member: bool = False


@attrs.frozen
class Target:
    """What the hostile machine aims at: the destination, and the honest team's member living there."""

    machine: str
    team: str
    member: str
    agent: str
    exchange: str  # a question of the honest team (its notice id is known: ids are not secrets)


def attempts(
    peer: HostilePeer, target: Target, seen: Iterable[Command], now: int, ttl: int
) -> list[tuple[str, OwnerRequest]]:
    """Every request the hostile machine may hand the destination now, labelled; `seen` are the requests in
    flight on the honest owner's link."""

    def submit(team: str, kind: NoticeKind, subject: str, member: str) -> d.Submit:
        text = f"[team {target.team}] sent by {peer.machine}"  # dressed as the honest team's notice
        nid = notice_id(team, subject, kind)
        return d.Submit(now, team, nid, kind, subject, member, target.machine, target.agent, now + ttl, text)

    own, theirs, agent, member = peer.team, target.team, target.agent, target.member
    question = notice_id(theirs, target.exchange, NoticeKind.QUESTION)
    intro, ask, answer = NoticeKind.INTRODUCTION, NoticeKind.QUESTION, NoticeKind.ANSWER
    found: list[tuple[str, OwnerRequest]] = [
        # (a) question and answer notices outside its grant
        (f"a question for {agent} as {own}'s member h9, never introduced", submit(own, ask, "x1", "h9")),
        (f"a question for {theirs}'s member {member} ({agent})", submit(theirs, ask, "x2", member)),
        (
            f"an answer to {target.exchange} for {member} ({agent})",
            submit(theirs, answer, target.exchange, member),
        ),
        # (b) a foothold in the owner's team
        (f"an introduction of {agent} into {theirs} as h1", submit(theirs, intro, "h1", "h1")),
        (f"a question for {theirs}'s member h1 ({agent})", submit(theirs, ask, "x3", "h1")),
        # steering the owner's team
        (f"a hold of team {theirs}", d.Hold(now, theirs)),
        (f"a withdrawal of team {theirs}", d.WithdrawTeam(now, theirs)),
        (f"a withdrawal of {question}", d.Withdraw(now, question)),
    ]
    if peer.own_member:  # its grant
        found.append((f"an introduction of {agent} into {own} as h1", submit(own, intro, "h1", "h1")))
        found.append((f"a question for {own}'s member h1 ({agent})", submit(own, ask, "x4", "h1")))
    # (c) the owner's requests it saw on the relay, as its own
    replays = {describe_command(command): command for command in seen if isinstance(command, OWNER_REQUESTS)}
    found.extend((f"the owner's {label}, as its own", command) for label, command in sorted(replays.items()))
    return [(f"{peer.machine} sends {target.machine} {label}", command) for label, command in found]


__all__ = ["HostilePeer", "Target", "attempts"]
