# Issue 14, finding 7 (the trust boundary): a member may read only the questions it asked or was asked. A
# reply, a cancel, a follow-up (`parentId`), a `status` or a `wait` naming another pair's question must answer
# exactly as for a question id that does not exist, so an outsider learns neither that the question exists nor
# who asked whom. Each case compares two twin ledgers with the same history, one where the pair's question has
# the probed id and one where it has another id: the outsider's outcome must be equal in both.
from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from harness.core import commands as c
from harness.core.errors import ErrorCode as E
from harness.core.errors import Rejected
from harness.core.outcome import Accepted
from harness.core.queries import visible_exchange
from harness.core.records import QuestionState
from harness.core.team import step
from harness.io.client import RemoteError
from tests.team_helpers import TEAM, Driver
from tests.test_daemon import Api, running, team_with_keys

PROBED = "q-secret"  # the id the outsider names
ELSEWHERE = "q-elsewhere"  # the same question in the twin ledger, under another id
SECRET = "SECRET: is the staging password still hunter2?"
MEMBERS = 4
STATES = ("open", "answered", "cancelled", "expired", "late")


def pair_history(question_id: str, asker: int, addressee: int, state: str, paused: bool) -> Driver:
    """A team of four where `asker` asked `addressee` one question, driven to `state`."""
    d = Driver().create(MEMBERS)
    asked = d.ask(question_id, asker, addressee, SECRET, ttl_ms=10_000)
    assert isinstance(asked, Accepted)
    if state == "answered":
        d.ok(c.Reply(d.tick(), TEAM, question_id, "yes", member_key=f"key{addressee}"))
    elif state == "cancelled":
        d.ok(c.Cancel(d.tick(), TEAM, question_id, member_key=f"key{asker}"))
    elif state in ("expired", "late"):
        d.ok(c.Tick(asked.result.deadline_at, TEAM))
        if state == "late":
            d.ok(c.Reply(d.tick(), TEAM, question_id, "sorry, late", member_key=f"key{addressee}"))
    if paused:
        d.ok(c.PauseTeam(d.tick(), TEAM))
    return d


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, int, int, str, bool]:
    asker, addressee, outsider = draw(st.permutations(range(1, MEMBERS + 1)))[:3]
    return asker, addressee, outsider, draw(st.sampled_from(STATES)), draw(st.booleans())


def outsider_commands(draw: st.DrawFn, outsider: int, at: int) -> list[c.TeamCommand]:
    """Every way a member can name a question it is not part of, with whatever else it likes around it."""
    key = f"key{outsider}"
    text = draw(st.sampled_from(["", "   ", "me!", "x" * 20_000]))
    evidence = draw(st.sampled_from([(), ("a.py:1",), ("",), ("y" * 2_000,)]))
    member_id = draw(st.sampled_from([None, *(f"mem{n}" for n in range(1, MEMBERS + 1)), "nobody"]))
    to = draw(st.sampled_from([*(f"mem{n}" for n in range(1, MEMBERS + 1)), "agent-1", "nobody"]))
    return [
        c.Reply(at, TEAM, PROBED, text, evidence, member_id, key),
        c.Cancel(at, TEAM, PROBED, key),
        c.Ask(at, TEAM, "follow-up", to, text, parent_id=PROBED, member_key=key),
    ]


def names_of(d: Driver, *members: int) -> list[str]:
    team = d.team
    return [
        part
        for n in members
        for part in (f"mem{n}", team.members[f"mem{n}"].name, team.members[f"mem{n}"].agent_id)
    ]


@given(scenario=scenarios(), data=st.data())
def test_finding_7_an_outsiders_reply_cancel_and_follow_up_answer_as_for_an_unknown_question(
    scenario: tuple[int, int, int, str, bool], data: st.DataObject
) -> None:
    """Seed: "Only the addressed member can answer as that agent" and "`parentId` links a follow-up to an
    exchange involving the sender"; a member outside the exchange is told only that there is no such
    question for it, exactly as if the id did not exist."""
    asker, addressee, outsider, state, paused = scenario
    real = pair_history(PROBED, asker, addressee, state, paused)
    twin = pair_history(ELSEWHERE, asker, addressee, state, paused)
    key = f"key{outsider}"
    anyone_else = next(n for n in range(1, MEMBERS + 1) if n != outsider)
    follow_up = c.Ask(
        real.tick(), TEAM, "follow-up", f"mem{anyone_else}", "and?", parent_id=PROBED, member_key=key
    )
    codes = []
    for command in [*outsider_commands(data.draw, outsider, real.tick()), follow_up]:
        seen = step(real.ledger, command)
        assert seen == step(twin.ledger, command), command
        assert isinstance(seen, Rejected)
        for secret in (*names_of(real, asker, addressee), SECRET):
            assert secret not in seen.detail
        codes.append(seen.code)
    reply_code, cancel_code, _any_ask_code, follow_up_code = codes
    assert (reply_code, cancel_code) == (E.NOT_FOUND, E.NOT_FOUND)
    assert follow_up_code is E.NOT_FOUND


@given(scenario=scenarios())
def test_finding_7_an_outsiders_status_answers_as_for_an_unknown_question(
    scenario: tuple[int, int, int, str, bool],
) -> None:
    asker, addressee, outsider, state, paused = scenario
    real = pair_history(PROBED, asker, addressee, state, paused)
    twin = pair_history(ELSEWHERE, asker, addressee, state, paused)
    viewer = real.team.members[f"mem{outsider}"]
    seen = visible_exchange(real.team, viewer, PROBED)
    assert seen == visible_exchange(twin.team, viewer, PROBED)
    assert isinstance(seen, Rejected) and seen.code is E.NOT_FOUND


@given(scenario=scenarios())
def test_finding_7_the_asker_and_addressee_keep_their_answers_and_errors(
    scenario: tuple[int, int, int, str, bool],
) -> None:
    asker, addressee, _outsider, state, paused = scenario
    d = pair_history(PROBED, asker, addressee, state, paused)
    exchange = d.exchange(PROBED)
    for party in (asker, addressee):
        assert visible_exchange(d.team, d.team.members[f"mem{party}"], PROBED) == exchange
    # The asker is not the addressee, and the addressee is not the asker: both may see the question.
    wrong_reply = step(d.ledger, c.Reply(d.tick(), TEAM, PROBED, "me!", member_key=f"key{asker}"))
    assert isinstance(wrong_reply, Rejected) and wrong_reply.code is E.WRONG_MEMBER
    wrong_cancel = step(d.ledger, c.Cancel(d.tick(), TEAM, PROBED, member_key=f"key{addressee}"))
    assert isinstance(wrong_cancel, Rejected) and wrong_cancel.code is E.WRONG_MEMBER
    reply = step(d.ledger, c.Reply(d.tick(), TEAM, PROBED, "GET /state", member_key=f"key{addressee}"))
    cancel = step(d.ledger, c.Cancel(d.tick(), TEAM, PROBED, member_key=f"key{asker}"))
    expected_reply = {"open": None, "answered": E.CONFLICT, "late": E.CONFLICT}.get(state)
    expected_cancel = {"answered": E.CONFLICT, "expired": E.EXPIRED, "late": E.EXPIRED}.get(state)
    assert (reply.code if isinstance(reply, Rejected) else None) is expected_reply, reply
    assert (cancel.code if isinstance(cancel, Rejected) else None) is expected_cancel, cancel
    for party, other in ((asker, addressee), (addressee, asker)):
        follow_up = c.Ask(
            d.tick(), TEAM, f"f{party}", f"mem{other}", "and?", parent_id=PROBED, member_key=f"key{party}"
        )
        outcome = step(d.ledger, follow_up)
        assert isinstance(outcome, Accepted) and outcome.result.depth == 2, outcome


def test_finding_7_the_owner_still_sees_every_question_and_its_errors_name_the_pair() -> None:
    """The owner acts as the person: it may read, answer for and cancel any question, and its errors may
    name the members involved."""
    d = pair_history(PROBED, 1, 2, "open", False)
    assert visible_exchange(d.team, None, PROBED) == d.exchange(PROBED)
    wrong = d.fails(c.Reply(d.tick(), TEAM, PROBED, "for 3", member_id="mem3"), E.WRONG_MEMBER)
    assert "mem2" in wrong.detail
    d.fails(c.Ask(d.tick(), TEAM, "f1", "mem4", "x", parent_id=PROBED, from_="mem3"), E.BAD_REQUEST)
    assert d.ok(c.Cancel(d.tick(), TEAM, PROBED)).result.state is QuestionState.CANCELLED


# --- the same, end to end through a real daemon ------------------------------------------------------------


async def _outsider_errors(home: Path, question_id: str) -> list[tuple[str, str, str | None, str | None]]:
    """alice asks bob `question_id`; carol names PROBED in every call that takes a question id."""
    async with running(home) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        alice, carol = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["carol"])
        await alice("ask", "t1", id=question_id, to="bob", text=SECRET)
        calls = [
            ("reply", {"questionId": PROBED, "text": "me"}),
            ("cancel", {"questionId": PROBED}),
            ("ask", {"id": "follow-up", "to": "alice", "text": "and?", "parentId": PROBED}),
            ("status", {"questionId": PROBED}),
            ("wait", {"questionId": PROBED, "seconds": 0}),
        ]
        errors: list[RemoteError] = [await carol.error(action, "t1", **fields) for action, fields in calls]
        return [(e.code, e.detail, e.operation_id, e.bound) for e in errors]


async def test_finding_7_through_the_daemon_an_outsider_cannot_tell_who_asked_whom(tmp_path: Path) -> None:
    seen = await _outsider_errors(tmp_path / "real", PROBED)
    unknown = await _outsider_errors(tmp_path / "twin", ELSEWHERE)
    assert seen == unknown
    assert {code for code, *_ in seen} == {"not_found"}
    for _code, detail, *_ in seen:
        assert not any(word in detail for word in ("alice", "bob", SECRET))


async def test_finding_7_through_the_daemon_the_pair_keeps_its_errors(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon:
        owner = await Api.open(daemon)
        keys = await team_with_keys(owner)
        alice, bob = await Api.open(daemon, keys["alice"]), await Api.open(daemon, keys["bob"])
        await alice("ask", "t1", id=PROBED, to="bob", text=SECRET)
        assert (await alice.error("reply", "t1", questionId=PROBED, text="me")).code == "wrong_member"
        assert (await bob.error("cancel", "t1", questionId=PROBED)).code == "wrong_member"
        assert (await bob("status", "t1", questionId=PROBED))["text"] == SECRET
        assert (await bob("ask", "t1", id="f1", to="alice", text="and?", parentId=PROBED))["depth"] == 2
