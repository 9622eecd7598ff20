"""docs/architecture.md names every requirement tag the code uses, and where it lives."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAG = re.compile(
    r"\b(?:CFG|PROV|LOOP|CTX|PROMPT|TOOL|SBX|PERM|HOOK|MCP|SKILL|MEM|AGT|PLAN|TASK|CLI)-\d+\b"
)


def tags_in_code() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / "soong_agent").rglob("*.py"):
        for tag in TAG.findall(path.read_text(encoding="utf-8")):
            found.setdefault(tag, set()).add(str(path.relative_to(ROOT / "soong_agent")))
    return found


def documented() -> dict[str, str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Requirement tags", 1)[1]
    rows = re.findall(r"^\| ([A-Z]+-\d+) \| (.+) \|$", section, re.MULTILINE)
    return dict(rows)


def test_every_tag_used_in_the_code_is_in_the_table() -> None:
    missing = sorted(set(tags_in_code()) - set(documented()))
    assert missing == [], f"add these tags to the table in docs/architecture.md: {missing}"


def test_every_documented_tag_is_still_used() -> None:
    stale = sorted(set(documented()) - set(tags_in_code()))
    assert stale == [], f"these tags no longer appear in the code: {stale}"


def test_each_documented_place_exists() -> None:
    for tag, places in documented().items():
        for place in re.findall(r"`([^`]+)`", places):
            assert (ROOT / "soong_agent" / place).exists(), f"{tag}: {place} does not exist"
