# The one shape every reducer answers with. Accepted carries the new state, the record the caller asked
# for, what happened (events, for watchers and checkers) and what the shell must do next (effects, executed
# only after the command is durable: persist before act). Rejected leaves the state exactly as it was.
from __future__ import annotations

from typing import Generic, TypeVar

import attrs

from .errors import ErrorCode, Rejected

S = TypeVar("S")


@attrs.frozen
class Accepted(Generic[S]):
    state: S
    result: object = None
    events: tuple[object, ...] = ()
    effects: tuple[object, ...] = ()
    changed: bool = True  # False: an idempotent repeat or a no-op; nothing to persist or publish


Outcome = Accepted[S] | Rejected


def reject(code: ErrorCode, detail: str, bound: str | None = None) -> Rejected:
    return Rejected(code, detail, bound)


def unchanged(state: S, result: object = None) -> Accepted[S]:
    return Accepted(state, result, changed=False)
