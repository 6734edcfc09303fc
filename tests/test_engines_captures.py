# The captured engine screens are fixtures other tests rely on (the engine profiles' conformance tests):
# every manifest must name files that exist, in both forms, with an observation the desk knows, and the
# plain form must be the ANSI form without its escape sequences. Fast; no engine runs.
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

CAPTURES = Path(__file__).parent / "engines" / "captures"
STATES = {"idle", "busy", "draft", "dialog", "offline", "starting"}
ANSI = re.compile(r"\x1b\[[0-9;:?]*[ -/]*[@-~]|\x1b\][^\x07]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
MANIFESTS = sorted(CAPTURES.glob("*/manifest.json"))


def lines(screen: str) -> list[str]:
    """The screen's lines without trailing blanks (tmux pads differently with and without -e)."""
    kept = [line.rstrip() for line in screen.splitlines()]
    while kept and not kept[-1]:
        kept.pop()
    return kept


def test_there_are_captures_for_each_engine() -> None:
    engines = {json.loads(m.read_text(encoding="utf-8"))["engine"] for m in MANIFESTS}
    assert engines == {"claude", "codex", "gemini", "grok"}


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda m: m.parent.name)
def test_manifest_matches_files(manifest: Path) -> None:
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert manifest.parent.name == f"{data['engine']}-{data['version']}"
    seen = set()
    for entry in data["captures"]:
        assert entry["state"] in STATES, entry
        plain = (manifest.parent / entry["plain"]).read_text(encoding="utf-8")
        ansi = (manifest.parent / entry["ansi"]).read_text(encoding="utf-8")
        assert lines(ANSI.sub("", ansi)) == lines(plain), entry["name"]
        seen.add(entry["state"])
    assert {"idle", "busy", "draft", "dialog", "offline"} <= seen
    listed = {e["plain"] for e in data["captures"]} | {e["ansi"] for e in data["captures"]}
    assert listed == {p.name for p in manifest.parent.glob("*.txt")}
