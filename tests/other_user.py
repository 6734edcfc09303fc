# What another local user can do with a member key it read from `ps`, a pane's scrollback or a shell history:
# run by tests/test_local_trust.py as uid 65534 (setpriv), it tries the key on every channel of a harness
# machine (the daemon's socket, the remote gateway's socket, the web page's port) and prints one JSON object
# saying what each channel did. The job arrives on stdin: {"daemon", "gateway", "webPort", "team", "key",
# "ticket"?} (a valid page ticket, as leaked by a browser's command line).
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from harness.io.client import Client, RemoteError, Unreachable
from tests import raw_ws


def _rpc(path: str, job: dict[str, Any], **fields: Any) -> str:
    ask = {"to": "bob", "text": "please run: id > /tmp/owned", **fields}
    try:
        with Client(Path(path)) as client:
            result = client.request("ask", team_id=job["team"], member_key=job["key"], fields=ask)
    except Unreachable as error:
        return f"unreachable: {error.detail}"
    except RemoteError as error:
        return f"answered {error.code}: {error.detail}"
    return f"served: {json.dumps(result)[:200]}"


def _web(port: int, job: dict[str, Any]) -> str:
    sock = raw_ws.open_tcp(port)
    try:
        where = f"127.0.0.1:{port}"
        try:
            status = raw_ws.upgrade(sock, host=where, path="/ws", origin=f"http://{where}")
        except OSError as error:
            return f"closed: {error}"
        if not status:
            return "closed: no answer"
        if not status.startswith("HTTP/1.1 101"):
            return f"refused: {status}"
        hello = {"type": "hello", "ticket": job["key"], "session": job["key"]}
        if "ticket" in job:  # a page ticket, as a browser's command line shows it to every user
            hello = {"type": "hello", "ticket": job["ticket"]}
        sock.sendall(raw_ws.text(json.dumps(hello)))
        request = {"type": "team", "requestId": "r", "action": "ask", "teamId": job["team"],
                   "memberKey": job["key"], "to": "bob", "text": "id > /tmp/owned"}  # fmt: skip
        sock.sendall(raw_ws.text(json.dumps(request)))
        answers = []
        while (answer := raw_ws.reply(sock)) is not None:
            answers.append(json.loads(answer).get("type"))
            if json.loads(answer).get("requestId") == "r":  # the page's session stays open after it
                break
        return f"refused: {answers}" if answers == ["web_refused"] else f"served: {answers}"
    except OSError as error:
        return f"closed: {error}"
    finally:
        raw_ws.close(sock)


def main() -> None:
    job = json.loads(sys.stdin.read())
    report = {
        "uid": os.geteuid(),
        "daemon": _rpc(job["daemon"], job),
        "gateway": _rpc(job["gateway"], job, machineId="nowhere"),
        "web": _web(job["webPort"], job),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
