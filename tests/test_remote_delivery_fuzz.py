# A paired machine's `delivery` requests as an attacker holding its keys would write them (issue 15,
# finding 5): Hypothesis builds desk commands and notice contents, well-formed and not (wrong types, extra or
# missing fields, nested junk, another notice's content, ids that are paths, keys outside introductions,
# control bytes everywhere), and sends each to a real node's `_execute` (the function every opened sealed
# request reaches). Whatever arrives: the node answers with a result or a refusal code of the spec, never
# raises; a refusal changes nothing (grants, routes.json, the desk); and every submit the desk receives is
# one the grant admits, rendered here, terminal-safe and framed by this machine.
from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from harness.core import delivery as d
from harness.core.records import NoticeKind
from harness.core.remote_grant import Grants, admit
from harness.core.terminal_text import is_terminal_safe
from harness.io import pairing
from harness.io.remote import ROUTES_FILE, RemoteNode
from tests.test_relay_remote import FakeDesk

HERE = "machine-here"
SENDERS = ("machine-owner", "machine-owner", "machine-other")
CODES = {"bad_request", "not_found", "conflict", "bound_exceeded"}
HOSTILE_IDS = st.sampled_from(("../x", "a b", "", "x" * 200, "t1/../../k"))
IDS = st.sampled_from(("t1", "t2", "mem1", "mem2", "q1")) | HOSTILE_IDS
TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ("hi\x1b[201~touch F\r", "\x03\x15\x00", "\u202etxt")
)
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
KINDS = st.sampled_from([k.value for k in NoticeKind])


@st.composite
def submits(draw: st.DrawFn) -> dict[str, Any]:
    """A submit as an honest owner sends it (introduction, question or answer of a few ids), then at most
    one hostile change: another machine, an id that is a path, another notice's content, a key where none
    belongs or a broken one, a field of the wrong type, no content at all."""
    kind = draw(KINDS)
    team, subject = draw(st.sampled_from(("t1", "t1", "t2"))), draw(st.sampled_from(("mem1", "q1", "q2")))
    member = subject if kind == "introduction" else draw(st.sampled_from(("mem1", "mem1", "mem2")))
    command: dict[str, Any] = {
        "type": "submit",
        "at": 1,
        "teamId": team,
        "noticeId": f"{team}/{subject}/{kind}",
        "kind": kind,
        "subjectId": subject,
        "membershipId": member,
        "machineId": HERE,
        "agentId": draw(st.sampled_from(("agent-a", "agent-a", "agent-b"))),
        "expiresAt": 10**13,
        "text": draw(TEXT),
    }
    content: dict[str, Any] = {
        "kind": kind,
        "teamId": team,
        "teamName": draw(TEXT),
        "subjectId": subject,
        "speaker": draw(TEXT),
        "role": draw(TEXT),
        "teammates": draw(st.lists(st.fixed_dictionaries({"name": TEXT, "role": TEXT}), max_size=2)),
        "memberKey": "k0ffee" if kind == "introduction" else "",
        "text": draw(TEXT),
        "context": draw(st.none() | TEXT),
        "evidence": draw(st.lists(TEXT, max_size=2)),
    }
    change = draw(st.integers(0, 9))
    if change == 1:
        command["machineId"] = "machine-elsewhere"
    elif change == 2:
        command[draw(st.sampled_from(("teamId", "subjectId", "membershipId")))] = draw(HOSTILE_IDS)
    elif change == 3:
        field = draw(st.sampled_from(("kind", "teamId", "subjectId")))
        content[field] = draw(st.sampled_from(("question", "t9")))
    elif change == 4:
        content["memberKey"] = draw(st.sampled_from(("", "k", "k 1\n", "../k")))
    elif change == 5:
        content[draw(st.sampled_from(sorted(content)))] = draw(JUNK)
    elif change == 6:
        return command
    return {**command, "content": content}


INTRODUCTION = {
    "type": "submit",
    "at": 1,
    "teamId": "t1",
    "noticeId": "t1/mem1/introduction",
    "kind": "introduction",
    "subjectId": "mem1",
    "membershipId": "mem1",
    "machineId": HERE,
    "agentId": "agent-a",
    "expiresAt": 10**13,
    "text": "",
    "content": {
        "kind": "introduction",
        "teamId": "t1",
        "teamName": "T",
        "subjectId": "mem1",
        "speaker": "bob",
        "role": "",
        "teammates": [],
        "memberKey": "k0ffee",
        "text": "",
        "context": None,
        "evidence": [],
    },
}
REQUESTS = st.one_of(
    submits(),
    st.builds(lambda team: {"type": "hold", "at": 1, "teamId": team}, IDS),
    st.builds(
        lambda team, m: {"type": "withdraw_member", "at": 1, "teamId": team, "membershipId": m}, IDS, IDS
    ),
    st.dictionaries(st.sampled_from(("type", "at", "teamId", "content")), JUNK, max_size=4),
    JUNK,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    introduced=st.booleans(),
    history=st.lists(st.tuples(st.sampled_from(SENDERS), REQUESTS), min_size=1, max_size=8),
)
def test_any_delivery_request_is_admitted_by_the_grant_or_refused_and_changes_nothing(
    tmp_path: Path, introduced: bool, history: list[tuple[str, object]]
) -> None:
    if introduced:  # the owner introduced mem1 as agent-a in t1 first: its questions and answers may follow
        history = [("machine-owner", INTRODUCTION), *history]
    home = tmp_path / f"home-{len(list(tmp_path.iterdir()))}"
    node = RemoteNode(home, log=lambda line: None)
    node.machine_id = HERE
    desk = FakeDesk(node.route_report)
    node.local_delivery = desk

    def routes_file() -> bytes | None:
        path = home / pairing.REMOTE_DIR / ROUTES_FILE
        return path.read_bytes() if path.exists() else None

    admitted: list[NoticeKind] = []

    async def run() -> None:
        for sender, command in history:
            peer = pairing.Peer(sender, b"\x01" * 32, "ws://127.0.0.1:1", 0)
            grants, routes, held = node._grants, routes_file(), len(desk.requests)
            response = await node._execute(peer, {"ch": "delivery", "command": command})
            if "error" in response:
                assert response["error"] in CODES, response
                assert node._grants == grants and len(desk.requests) == held
                assert routes_file() == routes
                continue
            assert response == {"result": True}
            (taken,) = desk.requests[held:]
            assert isinstance(admit(grants, here=HERE, sender=sender, command=taken, owned_here=()), Grants)
            if isinstance(taken, d.Submit):
                assert is_terminal_safe(taken.text) and taken.text.startswith("[team ")
                assert taken.machine_id == HERE
                named = taken.team_id + taken.subject_id + taken.membership_id  # they name files here
                assert set(named) <= set(string.ascii_letters + string.digits + "._:-")
                admitted.append(taken.kind)

    trio.run(run)
    event(f"submits admitted: {sorted(set(admitted))}")
