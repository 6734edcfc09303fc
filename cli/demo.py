# `harness demo`: one question's whole life on a throw-away daemon, so a newcomer sees the protocol work
# (ask, delivery queued while the peer is offline, inbox, explicit reply, wait resuming the asker) without
# setting anything up. It drives the real daemon over the real loopback RPC.
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from harness.io import home as homes
from harness.io.client import Client


def run_demo() -> None:
    import trio

    with tempfile.TemporaryDirectory(prefix="harness-demo-") as tmp:
        trio.run(_demo, Path(tmp))


async def _demo(home: Path) -> None:
    import trio

    from harness.io.daemon import Daemon

    daemon = Daemon(home, log=lambda line: None)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run, 0)
        await trio.to_thread.run_sync(_script, home, daemon.port)
        daemon.stop()


def _say(title: str, value: Any) -> None:
    print(f"\n== {title}")
    print(json.dumps(value, indent=2, ensure_ascii=False))


def _script(home: Path, port: int) -> None:
    token = homes.read_owner_token(home)
    with Client(port) as client:
        _say("capabilities", client.check_compatible()["protocol"])
        team = client.request(
            "create",
            owner_token=token,
            fields={
                "id": "demo",
                "name": "Demo team",
                "members": [
                    {
                        "machineId": "this-machine",
                        "agentId": "agent-a",
                        "name": "mobile",
                        "role": "Phone client",
                    },
                    {
                        "machineId": "this-machine",
                        "agentId": "agent-b",
                        "name": "daemons",
                        "role": "Daemon APIs",
                    },
                ],
            },
        )
        _say("team created", {"id": team["id"], "members": [m["name"] for m in team["members"]]})
        mobile, daemons = (
            client.request("key", team_id="demo", owner_token=token, fields={"memberId": name})["memberKey"]
            for name in ("mobile", "daemons")
        )
        asked = client.request(
            "ask",
            team_id="demo",
            member_key=mobile,
            fields={"id": "q1", "to": "daemons", "text": "Which endpoint returns daemon state?"},
        )
        _say("mobile asks daemons", {"question": asked["id"], "state": asked["state"]})
        box = client.request("inbox", team_id="demo", member_key=daemons)
        _say("daemons reads its inbox", [(q["id"], q["text"], q["delivery"]) for q in box["questions"]])
        answered = client.request(
            "reply",
            team_id="demo",
            member_key=daemons,
            fields={"questionId": "q1", "text": "GET /v1/daemon/state", "evidence": ["io/daemon.py:1"]},
        )
        _say("daemons replies", answered["answer"])
        resumed = client.request(
            "wait", team_id="demo", member_key=mobile, fields={"questionId": "q1", "seconds": 5}
        )
        _say(
            "mobile's wait returns",
            {"reason": resumed["reason"], "answer": resumed["exchange"]["answer"]["text"]},
        )
