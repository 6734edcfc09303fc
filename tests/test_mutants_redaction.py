# Issue 19: behaviours of core/redaction.py that scripts/mutate_core.py found no test pinned.
from __future__ import annotations

import pytest

from harness.core.redaction import DISABLED, Redactor, marker


@pytest.mark.parametrize(
    ("field", "kind"),
    [
        ("ownerToken", "owner_token"),
        ("owner_token", "owner_token"),
        ("memberKey", "member_key"),
        ("member_key", "member_key"),
    ],
)
def test_each_credential_field_is_replaced_whole_whatever_its_value_looks_like(field: str, kind: str) -> None:
    """A credential field's string is a secret even when no shape rule knows it (here: not hex at all)."""
    redacted = Redactor().value({field: "plainly-not-a-key", "note": "plainly-not-a-key"})
    assert redacted == {field: marker("pattern", kind), "note": "plainly-not-a-key"}


def test_the_marker_is_spelled_as_the_spec_shows_it() -> None:
    """spec/trace-v1.md: a detected secret becomes `[REDACTED:LAYER:NAME]`, brackets included."""
    assert Redactor().text("token ghp_abc123 end") == "token [REDACTED:pattern:ghp] end"


def test_the_disabled_redactor_leaves_text_alone() -> None:
    """HARNESS_REDACTION_DISABLED=1: nothing is redacted, text or JSON."""
    assert DISABLED.text("token ghp_abc123 end") == "token ghp_abc123 end"
    assert DISABLED.value({"ownerToken": "ghp_abc123"}) == {"ownerToken": "ghp_abc123"}
