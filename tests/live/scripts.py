# What the scripted fake model (tests/engines/fake_model.py) makes each engine do in a live team run. The
# model never reasons: each rule reads the notice the engine was given (the last user turn) and names the
# shell command the engine runs next, one per tool result, then a final text. The engine's own TUI, tool
# execution and permission flow do the rest, and the commands reach the daemon with the prefix the
# introduction taught, so nothing here knows a member key.
#
# No command uses `$(...)`: Gemini CLI refuses command substitution even in its YOLO mode.
#
# A model keeps its context in the conversation; this one only sees the last turn, so on its introduction it
# writes the prefix it was taught into `./team.sh` (a two-line script in its workdir) and uses that later:
# the same thing, kept in a file instead of in the context.
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

INTRODUCTION = r"You joined team [\s\S]*?Use: (?P<prefix>\S*harness team .+?) members \|"
QUESTION = r"Question (?P<qid>[\w.-]+) from (?P<asker>[\w-]+):"
ANSWER = r"(?P<who>[\w-]+) answered your question (?P<qid>[\w.-]+):"
SAVE_PREFIX = (
    r"""printf '#!/bin/sh\nexec %s "$@"\n' {{prefix|q}} > team.sh && chmod +x team.sh && echo saved"""
)
QUESTION_TEXT = "What is the exact value in your private/value.txt? Reply with only that value."
RESULT = "RESULT.txt"
# The model "thinks" this long before its first tool call on a notice, so the engine visibly runs a turn on
# the notice (which the desk records as `accepted`) before the command it runs changes the notice's state
# (an asker retrieving an answer marks its notice `read`).
THINK = 1.5


def question_id(peer: str) -> str:
    return f"q-{peer}"


def lead_script(peers: Sequence[str]) -> dict[str, Any]:
    """The lead: on its introduction it asks every peer for its private value (the question id names the
    peer); on each answer notice it retrieves that answer by its question id, and once every answer is in,
    it writes RESULT.txt with one `peer: value` line per peer, from the retrieved records."""
    asks = [f"./team.sh ask {peer} '{QUESTION_TEXT}' --id {question_id(peer)}" for peer in peers]
    files = [f"answers/{question_id(peer)}.txt" for peer in peers]
    have_all = " && ".join(f"[ -s {path} ]" for path in files)
    lines = "; ".join(f"printf '{peer}: '; cat {path}" for peer, path in zip(peers, files, strict=True))
    compose = (
        f"if {have_all}; then {{ {lines}; }} > {RESULT}.tmp && mv {RESULT}.tmp {RESULT}"
        f" && echo 'wrote {RESULT}'; else echo 'waiting for the other answers'; fi"
    )
    retrieve = (
        "mkdir -p answers && ./team.sh status {{qid|q}} --json"
        ' | python3 -c \'import json, sys; print(json.load(sys.stdin)["answer"]["text"])\''
        " > answers/{{qid}}.txt.tmp && mv answers/{{qid}}.txt.tmp answers/{{qid}}.txt"
        " && cat answers/{{qid}}.txt"
    )
    return {
        "rules": [
            {
                "when_regex": INTRODUCTION,
                "run": [SAVE_PREFIX, *asks],
                "final": f"Asked {', '.join(peers)} for their values; I continue when they answer.",
                "description": "Team step",
                "delay": THINK,
            },
            {
                "when_regex": ANSWER,
                "run": [retrieve, compose],
                "final": "Recorded the answer of {{who}} to {{qid}}.",
                "description": "Team step",
                "delay": THINK,
            },
        ],
        "default": "Nothing is scripted for that.",
    }


def peer_script() -> dict[str, Any]:
    """A peer: learns its prefix from the introduction, answers a question with the value of its own
    private/value.txt through `reply`."""
    return {
        "rules": [
            {
                "when_regex": INTRODUCTION,
                "run": SAVE_PREFIX,
                "final": "Ready: I know my team commands.",
                "description": "Team step",
                "delay": THINK,
            },
            {
                "when_regex": QUESTION,
                "run": "./team.sh reply {{qid|q}} --text-file private/value.txt",
                "final": "Answered {{qid}} for {{asker}} with my private value.",
                "description": "Team step",
                "delay": THINK,
            },
        ],
        "default": "Nothing is scripted for that.",
    }


BUSY_PROMPT = "HOLD-BUSY: think about the release notes for a while."
DIALOG_PROMPT = "RUN-GUARDED: create the guarded marker file."
GUARDED_FILE = "guarded.txt"


def safety_script() -> dict[str, Any]:
    """For the busy, draft and dialog checks: the human's own prompts keep the engine busy (held until the
    test releases the gate) or open a real permission dialog; notices are acknowledged in plain text."""
    return {
        "rules": [
            {"when_regex": INTRODUCTION, "text": "Joined the team."},
            {"when": "HOLD-BUSY", "text": "Done thinking.", "gate": "busy", "gate_timeout": 90.0},
            {
                "when": "RUN-GUARDED",
                "run": f"echo guarded > {GUARDED_FILE}",
                "final": "Created the marker.",
                "description": "Create the guarded marker file",
                "escalate": True,  # Codex: ask for approval, as the other two do in their default mode
            },
            {"when_regex": QUESTION, "text": "Noted question {{qid}}."},
        ],
        "default": "Noted your message.",
    }


# The board run (tests/test_live_board.py): the lead puts two tasks on the team's board, the second after the
# first, and asks the peer to take the first; the peer claims, starts and completes it with evidence and says
# so; on that answer the lead looks at the second task (ready now), leaves the peer a note and asks it to read
# its notes. Notes are pulled, never pushed, so the peer reads them only on that question, and its model holds
# that turn on a gate until the test has seen the note sit in the peer's unread set.
FIRST_TASK = "t-first"
SECOND_TASK = "t-second"
BOARD_QUESTION = "q-board"
NOTES_QUESTION = "q-notes"
NOTES_GATE = "notes"
DRAFT_FILE = "draft.txt"
SECOND_SEEN = "second.json"  # the second task as the lead saw it after the first was done
NOTES_PAGE = "notes.json"  # the page the peer's `board notes --unread --json` returned
NOTE_TEXT = "t-second is ready: please review the draft next."


def _board_step(when: str, run: list[str], final: str) -> dict[str, Any]:
    return {"when_regex": when, "run": run, "final": final, "description": "Board step", "delay": THINK}


def board_lead_script(peer: str) -> dict[str, Any]:
    """The lead: on its introduction, adds the two tasks (the second `--after` the first; the operation id is
    the task id) and asks `peer` to take the first; on the peer's answer, saves the second task as it sees it,
    leaves the peer a note and asks it to read its notes."""
    setup = [
        SAVE_PREFIX,
        f"./team.sh board task add 'Write the draft' --id {FIRST_TASK}",
        f"./team.sh board task add 'Review the draft' --after {FIRST_TASK} --id {SECOND_TASK}",
        f"./team.sh ask {peer} 'Please take task {FIRST_TASK} from our board and complete it.'"
        f" --id {BOARD_QUESTION}",
    ]
    follow_up = [
        f"./team.sh board task show {SECOND_TASK} --json > {SECOND_SEEN} && cat {SECOND_SEEN}",
        f"./team.sh board note {peer} '{NOTE_TEXT}'",
        f"./team.sh ask {peer} 'I left you a board note: read your unread notes.' --id {NOTES_QUESTION}",
    ]
    return {
        "rules": [
            _board_step(
                INTRODUCTION, setup, f"Put two tasks on the board and asked {peer} to take the first."
            ),
            _board_step(
                rf"(?P<who>[\w-]+) answered your question (?P<qid>{BOARD_QUESTION}):",
                follow_up,
                "The second task is next; I left {{who}} a note.",
            ),
        ],
        "default": "Nothing is scripted for that.",
    }


def board_peer_script() -> dict[str, Any]:
    """The peer: on the board question, claims, starts and completes the first task (evidence: the draft it
    wrote) and answers; on the notes question (held on the `notes` gate), reads its unread notes as JSON and
    answers with their texts."""
    work = [
        f"./team.sh board task claim {FIRST_TASK}",
        f"./team.sh board task start {FIRST_TASK} && echo 'first draft' > {DRAFT_FILE}",
        f"./team.sh board task done {FIRST_TASK} --evidence {DRAFT_FILE}:1",
        f"./team.sh reply {{{{qid|q}}}} 'done: {FIRST_TASK}'",
    ]
    texts = 'print("\\n".join(note["text"] for note in json.load(sys.stdin)["result"]["notes"]))'
    read = [
        f"./team.sh board notes --unread --json > {NOTES_PAGE} && cat {NOTES_PAGE}",
        f"python3 -c 'import json, sys; {texts}' < {NOTES_PAGE} > notes.txt"
        " && ./team.sh reply {{qid|q}} --text-file notes.txt",
    ]
    notes = _board_step(rf"Question (?P<qid>{NOTES_QUESTION}) from", read, "Read my notes.")
    return {
        "rules": [
            _board_step(INTRODUCTION, [SAVE_PREFIX], "Ready: I know my team commands."),
            _board_step(rf"Question (?P<qid>{BOARD_QUESTION}) from", work, f"Completed {FIRST_TASK}."),
            {**notes, "gate": NOTES_GATE, "gate_timeout": 300.0},
        ],
        "default": "Nothing is scripted for that.",
    }
