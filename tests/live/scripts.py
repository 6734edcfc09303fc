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
