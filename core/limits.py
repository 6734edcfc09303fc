# Every bound of team.v1 in one frozen value, each with the seed's number. Exhaustion is an explicit
# `bound_exceeded` naming the field below, never silent loss. Tests and the model checker shrink these.
from __future__ import annotations

import attrs

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


@attrs.frozen
class Limits:
    # Owner ledger.
    teams: int = 100  # retained teams per owner; archive does not free a slot
    memberships: int = 32  # retained memberships per team, removed ones included (they stay attributable)
    exchanges: int = 500  # retained exchanges per team
    pending_per_sender: int = 8  # open questions one member may have outstanding
    asks_per_minute: int = 30  # questions per rolling minute per team
    parent_chain: int = 4  # questions in one parent chain, the new one included
    question_chars: int = 8_000
    context_chars: int = 8_000
    answer_chars: int = 16_000
    evidence_refs: int = 16
    evidence_ref_chars: int = 1_024
    name_chars: int = 200  # team, member and role names; ids are shorter still
    id_chars: int = 128
    ttl_min_ms: int = 10_000
    ttl_max_ms: int = 24 * HOUR_MS
    ttl_default_ms: int = 15 * MINUTE_MS
    recent_answers: int = 20  # answers an inbox shows to an asker
    # Delivery desk.
    notice_bytes: int = 24 * 1024  # a terminal notice, UTF-8, after excerpting
    notice_ttl_ms: int = 24 * HOUR_MS  # introductions and answer notices
    queued_per_agent: int = 32  # queued or in-flight notices per agent session
    delivery_records: int = 10_000  # retained delivery records per destination
    observation_fresh_ms: int = 5_000  # an `idle` older than this no longer licenses a terminal write
    write_settle_ms: int = 2_000  # after a write ends, only an idle seen this much later counts (stable idle)
    write_timeout_ms: int = 60_000  # a write not reported ended by then is `unconfirmed`, never retried


DEFAULT_LIMITS = Limits()
