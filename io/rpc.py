# The `team` RPC frames of team.v1, shared by the daemon and its clients: one JSON object per WebSocket text
# message. Parsing is strict and total (every input is a Request or a FrameError, never a crash, whatever its
# size or nesting) because the frames come from other processes and, through the gateway, other machines.
# Standard library only: the CLI imports this on every call.
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from harness.core.actions import TEAM_ACTIONS, Field, Kind
from harness.core.bounded_json import JsonRefused, parse_json

PROTOCOL: Final = "team.v1"
# Bumped when an action or field is added, so a client can explain an older daemon instead of failing oddly.
PROTOCOL_REVISION: Final = 6
FEATURES: Final = (
    "operation-ids",  # create/add/ask are idempotent by their id; conflicting reuse fails with `conflict`
    "late-answers",  # a reply after expiry or cancellation is kept with `late: true`
    "wait",  # server-side blocking wait, broken by incoming questions
    "subscribe",  # team snapshots pushed to watchers as `team_snapshot` frames
    "member-key",  # the owner-only `key` action hands a member's key out for its introduction
    "delivery-view",  # exchanges carry the destination's delivery observation
    "agents",  # the owner-only agent_register/list/show/remove actions over this machine's agent registry
    "listener-stats",  # the owner-only daemon_status action: the listeners' refusal and fault counters
    "board",  # board_get and board: the team's board of roles, tasks and pulled notes (board-v1)
    "usage",  # the usage action: every bound with its use, a warning from 80 %, and what a person can do
    "question-reasons",  # cancel takes a reason; the owner's expire ends a question with one; views show it
    "team-delta",  # `subscribe` with `deltas: true` pushes `team_delta` frames: only the records that changed
)

# A request of team.v1 is at most ~50,000 characters of fields; this leaves room for escaping while keeping
# one client from making the daemon buffer much. Frames above it get `bad_request` and the connection lives.
MAX_FRAME_BYTES: Final = 256 * 1024
# Frames above this are not even buffered: the WebSocket layer closes that one connection (1009).
HARD_FRAME_BYTES: Final = 4 * MAX_FRAME_BYTES
MAX_REQUEST_ID_CHARS: Final = 128

REQUEST_TYPE: Final = "team"
RESULT_TYPE: Final = "team_result"
SNAPSHOT_TYPE: Final = "team_snapshot"
DELTA_TYPE: Final = "team_delta"

BAD_REQUEST: Final = "bad_request"
UNAUTHORIZED: Final = "unauthorized"
INCOMPATIBLE: Final = "incompatible"


# Who may send each action and the fields its frame may carry: core/actions.py, the one table of actions.
ACTIONS: Final = TEAM_ACTIONS

_FRAME_KEYS: Final = frozenset({"type", "requestId", "action", "teamId", "memberKey", "ownerToken"})


class FrameError(Exception):
    """A frame the daemon refuses with `bad_request`; `request_id` is known when the frame got that far."""

    def __init__(self, detail: str, request_id: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Request:
    request_id: str
    action: str
    team_id: str | None
    member_key: str | None
    owner_token: str | None
    fields: dict[str, Any] = field(default_factory=dict)

    def _fail(self, detail: str) -> FrameError:
        return FrameError(f"{self.action}: {detail}", self.request_id)

    def text(self, name: str) -> str:
        value = self.fields.get(name)
        if not isinstance(value, str):
            raise self._fail(f"'{name}' must be a string")
        return value

    def opt_text(self, name: str) -> str | None:
        return None if self.fields.get(name) is None else self.text(name)

    def opt_int(self, name: str) -> int | None:
        value = self.fields.get(name)
        if value is None:
            return None
        if type(value) is not int:
            raise self._fail(f"'{name}' must be an integer")
        return value

    def opt_number(self, name: str) -> float | None:
        value = self.fields.get(name)
        if value is None:
            return None
        if type(value) not in (int, float):
            raise self._fail(f"'{name}' must be a number")
        return float(value)

    def opt_bool(self, name: str) -> bool | None:
        value = self.fields.get(name)
        if value is None:
            return None
        if type(value) is not bool:
            raise self._fail(f"'{name}' must be true or false")
        return value

    def text_list(self, name: str) -> tuple[str, ...]:
        value = self.fields.get(name)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(f"'{name}' must be a list of strings")
        return tuple(value)

    def read(self, declared: Field) -> Any:
        """`declared`'s value as its kind reads it (core/actions.py); None when an optional one is absent."""
        assert declared.kind is not Kind.ANY, "a field of kind ANY is read by its action's own handler"
        if declared.required and declared.kind is Kind.TEXT:
            return self.text(declared.wire)
        value = _READERS[declared.kind](self, declared.wire)
        if declared.required and value is None:
            raise self._fail(f"'{declared.wire}' is required")
        return value

    def object_list(self, name: str) -> tuple[dict[str, Any], ...]:
        value = self.fields.get(name)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self._fail(f"'{name}' must be a list of objects")
        return tuple(value)


_READERS: Final[dict[Kind, Callable[[Request, str], Any]]] = {
    Kind.TEXT: Request.opt_text,
    Kind.INT: Request.opt_int,
    Kind.BOOL: Request.opt_bool,
    Kind.TEXT_LIST: Request.text_list,
}


def parse_frame(message: str | bytes) -> dict[str, Any]:
    """One JSON object from a text frame, bounded in size and depth before it is parsed. Raises FrameError."""
    if isinstance(message, bytes):
        raise FrameError("binary frames are not accepted; send JSON text")
    data = parse_json(message, max_bytes=MAX_FRAME_BYTES)
    if isinstance(data, JsonRefused):
        raise FrameError(f"frame refused ({data.reason}): {data.detail}")
    if not isinstance(data, dict):
        raise FrameError("a frame is one JSON object")
    return data


def parse_request(message: str | bytes) -> Request:
    """Validate one incoming message as a `team` request. Raises FrameError, nothing else."""
    data = parse_frame(message)
    request_id = data.get("requestId")
    if not isinstance(request_id, str) or not request_id or len(request_id) > MAX_REQUEST_ID_CHARS:
        raise FrameError(f"'requestId' must be a string of 1 to {MAX_REQUEST_ID_CHARS} characters")
    if data.get("type") != REQUEST_TYPE:
        raise FrameError(f"unknown frame type {data.get('type')!r}; expected {REQUEST_TYPE!r}", request_id)
    action = data.get("action")
    spec = ACTIONS.get(action) if isinstance(action, str) else None
    if spec is None or not isinstance(action, str):
        raise FrameError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}", request_id)
    strings: dict[str, str | None] = {}
    for key in ("teamId", "memberKey", "ownerToken"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise FrameError(f"'{key}' must be a non-empty string", request_id)
        strings[key] = value
    if spec.needs_team and strings["teamId"] is None:
        raise FrameError(f"'{action}' needs a 'teamId'", request_id)
    fields = {key: value for key, value in data.items() if key not in _FRAME_KEYS}
    unknown = sorted(set(fields) - spec.field_names)
    if unknown:
        raise FrameError(f"'{action}' has no field {', '.join(map(repr, unknown))}", request_id)
    return Request(request_id, action, strings["teamId"], strings["memberKey"], strings["ownerToken"], fields)


def _dump(frame: dict[str, Any]) -> str:
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


def request_frame(
    request_id: str,
    action: str,
    *,
    team_id: str | None = None,
    member_key: str | None = None,
    owner_token: str | None = None,
    fields: dict[str, Any] | None = None,
) -> str:
    frame: dict[str, Any] = {"type": REQUEST_TYPE, "requestId": request_id, "action": action}
    for key, value in (("teamId", team_id), ("memberKey", member_key), ("ownerToken", owner_token)):
        if value is not None:
            frame[key] = value
    for key, value in (fields or {}).items():
        if value is not None:
            frame[key] = value
    return _dump(frame)


def result_frame(request_id: str, result: object) -> str:
    return _dump({"type": RESULT_TYPE, "requestId": request_id, "result": result})


def error_frame(
    request_id: str | None, code: str, detail: str, operation_id: str | None = None, bound: str | None = None
) -> str:
    frame: dict[str, Any] = {"type": RESULT_TYPE, "requestId": request_id, "error": code, "detail": detail}
    if operation_id is not None:
        frame["operationId"] = operation_id
    if bound is not None:
        frame["bound"] = bound  # the exhausted bound of a `bound_exceeded`, by its Limits field name
    return _dump(frame)


def delta_frame(request_id: str, delta: dict[str, Any]) -> str:
    """One pushed change of a `deltas` subscription (core/team_delta.py), which the watcher applies to its
    copy at `baseRevision`; a change a delta cannot express comes as a whole snapshot instead."""
    return _dump(
        {
            "type": DELTA_TYPE,
            "requestId": request_id,
            "teamId": delta["id"],
            "revision": delta["revision"],
            "delta": delta,
        }
    )


def snapshot_frame(request_id: str, team: dict[str, Any]) -> str:
    """One pushed snapshot of a subscription; clients keep the highest revision they have seen."""
    return _dump(
        {
            "type": SNAPSHOT_TYPE,
            "requestId": request_id,
            "teamId": team["id"],
            "revision": team["revision"],
            "team": team,
        }
    )
