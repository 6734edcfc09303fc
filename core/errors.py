# Errors are values, not exceptions: a rejected command returns one of these stable codes (the outside
# contract's strings) with a human detail, and the state it was given stays untouched.
from __future__ import annotations

import enum

import attrs


class ErrorCode(enum.StrEnum):
    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    WRONG_MEMBER = "wrong_member"
    BOUND_EXCEEDED = "bound_exceeded"
    RATE_LIMITED = "rate_limited"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    TEAM_PAUSED = "team_paused"
    TEAM_ARCHIVED = "team_archived"
    OFFLINE = "offline"
    CORRUPT_STATE = "corrupt_state"
    INCOMPATIBLE = "incompatible"


@attrs.frozen
class Rejected:
    """A command the protocol refuses. `bound` names the exhausted bound for `bound_exceeded`."""

    code: ErrorCode
    detail: str
    bound: str | None = None


class ProtocolViolation(Exception):
    """Raised only by invariant checks: a reachable state broke a rule of the spec. Always a bug."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail
