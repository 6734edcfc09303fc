# Issue 15, finding 5: a paired machine pasted anything into any agent: a sealed `delivery` submit for a team
# that does not exist, addressed to an agent that shares no team with the sender, was written into that
# agent's terminal. `core.remote_grant.admit` is what a destination lets a paired machine do: exactly its
# grant (the teams it owns here, the memberships it introduced), everything else refused as a value.
from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.core import delivery as d
from harness.core.effects import notice_id
from harness.core.errors import ErrorCode, Rejected
from harness.core.limits import DEFAULT_LIMITS
from harness.core.records import NoticeKind
from harness.core.remote_grant import EMPTY_GRANTS, Grants, admit, rendered_here
from harness.core.system import NoticeContent
from harness.core.team import REINTRODUCED
from harness.core.terminal_text import is_terminal_safe

HERE, OWNER, OTHER = "m-here", "m-owner", "m-other"


def submit(
    kind: NoticeKind,
    *,
    team: str = "t1",
    member: str = "mem1",
    agent: str = "agent-a",
    subject: str = "q1",
    machine: str = HERE,
) -> d.Submit:
    subject = member if kind is NoticeKind.INTRODUCTION else subject
    return d.Submit(
        1, team, notice_id(team, subject, kind), kind, subject, member, machine, agent, 10**9, "x"
    )


def run(
    grants: Grants, command: object, sender: str = OWNER, owned: frozenset[str] = frozenset()
) -> Grants | Rejected:
    return admit(grants, here=HERE, sender=sender, command=command, owned_here=owned)  # type: ignore[arg-type]


def introduced() -> Grants:
    grants = run(EMPTY_GRANTS, submit(NoticeKind.INTRODUCTION))
    assert isinstance(grants, Grants)
    return grants


def test_finding_5_a_question_for_an_agent_never_introduced_is_refused() -> None:
    """The finding's submit: a team that does not exist here, an agent no team of the sender's holds."""
    refused = run(EMPTY_GRANTS, submit(NoticeKind.QUESTION))
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.NOT_FOUND
    refused = run(introduced(), submit(NoticeKind.QUESTION, agent="agent-b"))
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.NOT_FOUND
    refused = run(introduced(), submit(NoticeKind.ANSWER, member="mem2"))
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.NOT_FOUND


def test_an_introduced_member_gets_questions_and_answers() -> None:
    grants = introduced()
    assert grants.introduced("t1", "mem1") == "agent-a"
    assert run(grants, submit(NoticeKind.QUESTION)) == grants
    assert run(grants, submit(NoticeKind.ANSWER)) == grants


def test_no_submit_for_another_machine() -> None:
    refused = run(EMPTY_GRANTS, submit(NoticeKind.INTRODUCTION, machine=OTHER))
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.BAD_REQUEST


def test_another_machine_cannot_steer_or_join_a_team_it_does_not_own() -> None:
    grants = introduced()
    for command in (
        submit(NoticeKind.INTRODUCTION, member="mem2", agent="agent-b"),
        submit(NoticeKind.QUESTION),
    ):
        refused = run(grants, command, sender=OTHER)
        assert isinstance(refused, Rejected) and refused.code is ErrorCode.CONFLICT
    for command in (
        d.Hold(1, "t1"),
        d.Release(1, "t1"),
        d.Withdraw(1, notice_id("t1", "q1", NoticeKind.QUESTION)),
        d.WithdrawMember(1, "t1", "mem1"),
        d.WithdrawTeam(1, "t1"),
        d.InboxRead(1, (notice_id("t1", "q1", NoticeKind.QUESTION),)),
    ):
        refused = run(grants, command, sender=OTHER)
        assert isinstance(refused, Rejected) and refused.code is ErrorCode.NOT_FOUND, command


def test_no_peer_steers_a_team_owned_here() -> None:
    refused = run(EMPTY_GRANTS, submit(NoticeKind.INTRODUCTION), owned=frozenset({"t1"}))
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.CONFLICT


def test_a_membership_cannot_be_reintroduced_as_another_agent() -> None:
    refused = run(introduced(), submit(NoticeKind.INTRODUCTION, agent="agent-b"))
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.CONFLICT


def test_a_removed_membership_or_archived_team_is_no_longer_a_door() -> None:
    for withdrawal in (d.WithdrawMember(1, "t1", "mem1"), d.WithdrawTeam(1, "t1")):
        grants = run(introduced(), withdrawal)
        assert isinstance(grants, Grants)
        refused = run(grants, submit(NoticeKind.QUESTION))
        assert isinstance(refused, Rejected) and refused.code is ErrorCode.NOT_FOUND


def test_a_paused_teams_hold_binds_its_owner_before_any_notice() -> None:
    grants = run(EMPTY_GRANTS, d.Hold(1, "t1"))
    assert isinstance(grants, Grants) and grants.owner("t1") == OWNER
    refused = run(grants, submit(NoticeKind.INTRODUCTION), sender=OTHER)
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.CONFLICT


kinds = st.sampled_from(NoticeKind)
steps = st.lists(
    st.tuples(
        st.sampled_from((OWNER, OTHER)),
        st.one_of(
            st.builds(
                lambda kind, team, member, agent: submit(kind, team=team, member=member, agent=agent),
                kinds,
                st.sampled_from(("t1", "t2")),
                st.sampled_from(("mem1", "mem2")),
                st.sampled_from(("agent-a", "agent-b", "agent-x")),
            ),
            st.builds(
                lambda team, member: d.WithdrawMember(1, team, member),
                st.sampled_from(("t1", "t2")),
                st.sampled_from(("mem1", "mem2")),
            ),
        ),
    ),
    max_size=12,
)


@given(steps)
def test_every_admitted_question_or_answer_follows_its_senders_introduction(
    history: list[tuple[str, d.Submit | d.WithdrawMember]],
) -> None:
    """The grant as a property: whatever two machines send, a question or answer notice is admitted only
    when the same sender owns the team and introduced that membership as that agent, and did not withdraw
    it since; refusals change nothing."""
    grants = EMPTY_GRANTS
    doors: set[tuple[str, str, str, str]] = set()  # (sender, team, membership, agent) introduced, not removed
    owners: dict[str, str] = {}
    for sender, command in history:
        after = run(grants, command, sender=sender)
        if isinstance(after, Rejected):
            continue
        if isinstance(command, d.WithdrawMember):
            doors = {door for door in doors if door[1:3] != (command.team_id, command.membership_id)}
        elif command.kind is NoticeKind.INTRODUCTION:
            doors.add((sender, command.team_id, command.membership_id, command.agent_id))
        else:
            assert (sender, command.team_id, command.membership_id, command.agent_id) in doors
        if isinstance(command, d.Submit):
            assert owners.setdefault(command.team_id, sender) == sender
        grants = after


# --- the notice's text is rendered here, from the content, never taken from the wire ---------------------

CONTENT = NoticeContent(NoticeKind.QUESTION, "t1", "Team One", "q1", "alice", text="which branch?")


def here_prefix(team_id: str, member_key: str) -> str:
    return f"harness team --machine OWNER --team {team_id} --key-file /home/me/keys/{team_id}/member.key"


def test_finding_5_the_wire_text_is_never_what_reaches_the_terminal() -> None:
    """The finding pasted the submit's raw text, without a `[team …]` header: the destination now renders the
    notice from its ledger fields, and whatever text travelled is dropped."""
    raw = attrs.evolve(submit(NoticeKind.QUESTION), text="id > /tmp/pwned\r")
    rendered = rendered_here(raw, CONTENT, DEFAULT_LIMITS, here_prefix)
    assert isinstance(rendered, d.Submit)
    assert rendered.text.startswith("[team Team One] Question q1 from alice:\n> which branch?")
    assert "pwned" not in rendered.text
    assert attrs.evolve(rendered, text=raw.text) == raw  # nothing but the text changed


def test_a_hostile_content_is_rendered_visibly_inside_the_framing() -> None:
    hostile = attrs.evolve(CONTENT, team_name="x\x1b]0;t\x07", text="ok\x1b[201~\rtouch pwned\r")
    rendered = rendered_here(submit(NoticeKind.QUESTION), hostile, DEFAULT_LIMITS, here_prefix)
    assert isinstance(rendered, d.Submit) and is_terminal_safe(rendered.text)
    assert rendered.text.startswith("[team x␛]0;t^G] Question q1 from alice:\n> ok␛[201~^Mtouch pwned^M")


def test_an_introduction_teaches_this_machines_prefix_and_carries_no_key_on_the_command_line() -> None:
    intro = NoticeContent(NoticeKind.INTRODUCTION, "t1", "One", "mem1", "bob", "dev", member_key="K" * 32)
    rendered = rendered_here(submit(NoticeKind.INTRODUCTION), intro, DEFAULT_LIMITS, here_prefix)
    assert isinstance(rendered, d.Submit)
    assert "--key-file /home/me/keys/t1/member.key" in rendered.text and "K" * 32 not in rendered.text


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (attrs.evolve(CONTENT, subject_id="q2"), ErrorCode.BAD_REQUEST),  # another notice's content
        (attrs.evolve(CONTENT, team_id="t2"), ErrorCode.BAD_REQUEST),
        (attrs.evolve(CONTENT, kind=NoticeKind.ANSWER), ErrorCode.BAD_REQUEST),
        (attrs.evolve(CONTENT, member_key="K" * 32), ErrorCode.BAD_REQUEST),  # a key outside an introduction
        (attrs.evolve(CONTENT, text="x" * (DEFAULT_LIMITS.question_chars + 1)), ErrorCode.BOUND_EXCEEDED),
        (attrs.evolve(CONTENT, speaker="n" * (DEFAULT_LIMITS.name_chars + 1)), ErrorCode.BOUND_EXCEEDED),
    ],
)
def test_content_that_is_not_that_notices_or_out_of_bounds_is_refused(
    content: NoticeContent, code: ErrorCode
) -> None:
    refused = rendered_here(submit(NoticeKind.QUESTION), content, DEFAULT_LIMITS, here_prefix)
    assert isinstance(refused, Rejected) and refused.code is code


def test_an_introduction_without_its_key_is_refused() -> None:
    intro = NoticeContent(NoticeKind.INTRODUCTION, "t1", "Team One", "mem1", "bob", "reviewer")
    refused = rendered_here(submit(NoticeKind.INTRODUCTION), intro, DEFAULT_LIMITS, here_prefix)
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.BAD_REQUEST


@pytest.mark.parametrize(
    "hostile",
    [
        {"team_id": "../../etc"},  # a team id naming a path outside the key directory
        {"subject_id": "../x"},
        {"member_key": "K1 K2\n"},  # a key file holds one token
        {"member_key": "../../x"},
    ],
)
def test_ids_and_keys_that_would_name_or_fill_a_file_badly_are_refused(hostile: dict[str, str]) -> None:
    """The introduction's ids name the member's key file here, and its key fills it."""
    intro = NoticeContent(NoticeKind.INTRODUCTION, "t1", "Team One", "mem1", "bob", "r", member_key="a1b2")
    intro = attrs.evolve(intro, **hostile)
    command = attrs.evolve(
        submit(NoticeKind.INTRODUCTION), team_id=intro.team_id, subject_id=intro.subject_id
    )
    refused = rendered_here(command, intro, DEFAULT_LIMITS, here_prefix)
    assert isinstance(refused, Rejected), refused


def test_an_introduction_cannot_name_a_key_file_outside_its_team() -> None:
    """The key file is named by the membership id: an introduction whose membership is not its subject, or
    is not an id, is refused before any file is named."""
    intro = NoticeContent(NoticeKind.INTRODUCTION, "t1", "One", "mem1", "bob", "dev", member_key="a1b2")
    for membership in ("../../evil", "mem2"):
        command = attrs.evolve(submit(NoticeKind.INTRODUCTION), membership_id=membership)
        refused = rendered_here(command, intro, DEFAULT_LIMITS, here_prefix)
        assert isinstance(refused, Rejected) and refused.code is ErrorCode.BAD_REQUEST


HOSTILE_IDS = [
    (".", "t1/mem1"),
    ("../../victim", "server"),
    ("/etc", "passwd"),
    ("t" * 200_000, "m"),
    ("t1", "../x"),
]


@pytest.mark.parametrize(("team", "member"), HOSTILE_IDS, ids=["dot", "upward", "absolute", "huge", "member"])
def test_ids_that_would_name_a_path_or_fill_the_grant_are_refused(team: str, member: str) -> None:
    """A team or membership id names a key file here and a grant entry: an adversarial review deleted a
    member's key file (and one outside the data directory) with a hold of team `.` and a withdraw_member of
    `LOCALTEAM/member`. Every id of a request is an id as the ledger makes them, else `bad_request`."""
    grants = introduced()
    for command in (
        d.Hold(1, team),
        d.Release(1, team),
        d.WithdrawTeam(1, team, d.Reason.ARCHIVED),
        d.WithdrawMember(1, team, member, d.Reason.REMOVED),
        d.Withdraw(1, f"{team}/{member}/question", d.Reason.CANCELLED),
        d.InboxRead(1, (f"{team}/{member}/question",)),
    ):
        if team != "t1" or isinstance(command, d.WithdrawMember | d.Withdraw | d.InboxRead):
            refused = run(grants, command)
            assert isinstance(refused, Rejected) and refused.code is ErrorCode.BAD_REQUEST, command


def test_a_machine_owns_at_most_as_many_teams_here_as_a_ledger_retains() -> None:
    """Holds bind teams before any notice: without a bound, one machine's holds grew routes.json (rewritten
    and fsynced whole at each) and the desk's held teams without end."""
    grants: Grants | Rejected = EMPTY_GRANTS
    for n in range(DEFAULT_LIMITS.teams):
        assert isinstance(grants, Grants)
        grants = run(grants, d.Hold(1, f"team{n}"))
    assert isinstance(grants, Grants)
    refused = run(grants, d.Hold(1, "one-more"))
    assert isinstance(refused, Rejected) and (refused.code, refused.bound) == (
        ErrorCode.BOUND_EXCEEDED,
        "teams",
    )
    refused = run(grants, submit(NoticeKind.INTRODUCTION, team="one-more"))
    assert isinstance(refused, Rejected) and refused.code is ErrorCode.BOUND_EXCEEDED
    assert isinstance(run(grants, d.Hold(1, "team0")), Grants)  # a team it owns already is no new one
    assert isinstance(run(grants, d.Hold(1, "one-more"), sender=OTHER), Grants)  # the bound is per machine


def test_a_reintroduction_is_admitted_and_a_subject_whose_mark_is_no_time_is_not() -> None:
    """A member that attaches again is introduced anew under `TEAM/MEMBERSHIP~AT/introduction` (core/team.py
    `reintroductions`): its id check takes the membership and the time apart, so the grant admits it."""
    first = submit(NoticeKind.INTRODUCTION)
    again = attrs.evolve(first, notice_id=notice_id("t1", f"mem1{REINTRODUCED}1764000000000", first.kind))
    assert isinstance(run(introduced(), again), Grants)
    for subject in ("mem1~abc", "mem1~", "../x~1", "~1"):
        bad = attrs.evolve(first, notice_id=notice_id("t1", subject, first.kind))
        refused = run(introduced(), bad)
        assert isinstance(refused, Rejected) and refused.code is ErrorCode.BAD_REQUEST, subject


def test_a_team_withdrawn_whole_frees_its_place_and_a_repeat_of_it_is_a_no_op() -> None:
    """A review found the place bound a lifetime cap: nothing freed a place, so a pairing that had carried
    100 teams refused its 101st although its owner retained fewer. A team withdrawn whole (archived, deleted)
    frees its place; its withdrawal restated after a restart finds nothing and changes nothing."""
    grants: Grants | Rejected = EMPTY_GRANTS
    for n in range(DEFAULT_LIMITS.teams):
        assert isinstance(grants, Grants)
        grants = run(grants, d.Hold(1, f"team{n}"))
    assert isinstance(grants, Grants)
    freed = run(grants, d.WithdrawTeam(2, "team0", d.Reason.ARCHIVED))
    assert isinstance(freed, Grants) and freed.owner("team0") is None
    assert run(freed, d.WithdrawTeam(3, "team0", d.Reason.ARCHIVED)) == freed
    assert isinstance(run(freed, d.Hold(4, "one-more")), Grants)
    assert isinstance(run(freed, d.WithdrawTeam(3, "team1", d.Reason.ARCHIVED), sender=OTHER), Rejected)


def test_a_team_takes_at_most_as_many_introductions_as_memberships_and_agent_ids_are_bounded() -> None:
    """An introduction binds a membership to an agent in the kept grant: a review introduced 5,000 members
    into one team, one with a 100,000-character agent id."""
    grants: Grants | Rejected = EMPTY_GRANTS
    for n in range(DEFAULT_LIMITS.memberships):
        assert isinstance(grants, Grants)
        grants = run(grants, submit(NoticeKind.INTRODUCTION, member=f"mem{n}", agent=f"agent-{n}"))
    assert isinstance(grants, Grants)
    refused = run(grants, submit(NoticeKind.INTRODUCTION, member="one-more", agent="agent-x"))
    assert isinstance(refused, Rejected) and (refused.code, refused.bound) == (
        ErrorCode.BOUND_EXCEEDED,
        "memberships",
    )
    assert isinstance(run(grants, submit(NoticeKind.INTRODUCTION, member="mem0", agent="agent-0")), Grants)
    for agent in ("", "a" * (DEFAULT_LIMITS.id_chars + 1)):
        refused = run(EMPTY_GRANTS, submit(NoticeKind.INTRODUCTION, agent=agent))
        assert isinstance(refused, Rejected) and refused.code is ErrorCode.BAD_REQUEST


def test_an_id_exactly_at_its_bound_is_taken_and_a_refusal_names_what_it_refused() -> None:
    longest = "t" * DEFAULT_LIMITS.id_chars
    assert isinstance(run(EMPTY_GRANTS, d.Hold(1, longest)), Grants)
    refused = run(EMPTY_GRANTS, d.Hold(1, longest + "t"))
    assert isinstance(refused, Rejected) and refused.detail == f"the team id {longest[:40]!r} is not an id"
    refused = run(introduced(), d.WithdrawMember(1, "t1", "../x", d.Reason.REMOVED))
    assert isinstance(refused, Rejected) and refused.detail == "the membership id '../x' is not an id"
    withdraw = d.Withdraw(1, "t1/" + "q" * 200 + "/question", d.Reason.CANCELLED)
    refused = run(introduced(), withdraw)
    assert isinstance(refused, Rejected)
    assert refused.detail == f"the notice id {withdraw.notice_id[:40]!r} is not a notice id"


def test_a_notice_is_withdrawn_or_read_by_its_teams_owner_only() -> None:
    """Requests that name notices, not teams, are judged by the team each notice id names."""
    grants = introduced()
    mine = notice_id("t1", "q1", NoticeKind.QUESTION)
    for command in (
        d.Withdraw(1, mine, d.Reason.CANCELLED),
        d.InboxRead(1, (mine,)),
        d.AnswerRetrieved(1, mine),
    ):
        assert isinstance(run(grants, command), Grants), command
        refused = run(grants, command, sender=OTHER)
        assert isinstance(refused, Rejected) and refused.code is ErrorCode.NOT_FOUND, command


def test_an_agent_id_from_one_character_to_its_bound_is_taken() -> None:
    for agent in ("a", "a" * DEFAULT_LIMITS.id_chars):
        assert isinstance(run(EMPTY_GRANTS, submit(NoticeKind.INTRODUCTION, agent=agent)), Grants), len(agent)
    long = "a" * (DEFAULT_LIMITS.id_chars + 1)
    refused = run(EMPTY_GRANTS, submit(NoticeKind.INTRODUCTION, agent=long))
    assert isinstance(refused, Rejected)
    assert (
        refused.detail
        == f"the agent id {long[:40]!r} is empty or longer than {DEFAULT_LIMITS.id_chars} characters"
    )
