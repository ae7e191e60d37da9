"""The documentation describes the product as it is: no history words in README.md or docs/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Each phrase tells the story of a change instead of the product; the history lives in commits.
HISTORY = re.compile(
    r"\bissues? #?\d+"                                             # issue 23
    r"|\b(?:\d+(?:st|nd|rd|th)?|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth"
    r"|last|next|previous)\s+stop\b"                               # second stop, 3rd stop
    r"|\bstop\s+\d+"                                               # stop 12
    r"|\bas before\b|\bused to\b|\bnow\b|\bno longer\b|\bit used\b",
    re.IGNORECASE)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def history_lines(text: str, name: str) -> list[str]:
    """``name:line: text`` for every line that uses a history word."""
    return [f"{name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if HISTORY.search(line)]


@pytest.mark.parametrize("line, bad", [
    ("see issue 23 for the figures", True), ("issues 5456 and 5511", True), ("the third stop", True),
    ("at stop 12 we measured", True), ("2nd stop", True), ("as before, it commits", True),
    ("it used a thread", True), ("it is used to score", True), ("Now it commits", True),
    ("it no longer waits", True), ("a clean stop duplicates nothing", False),
    ("stop it with Ctrl+C", False), ("known limits", False), ("nowhere, snow, known", False),
    ("confluentinc/librdkafka#4849", False),
])
def test_the_pattern_finds_history_words_and_only_them(line: str, bad: bool) -> None:
    assert bool(history_lines(line, "x.md")) is bad, line


def test_the_docs_describe_the_product_as_it_is() -> None:
    assert len(pages()) > 5  # the docs folder is there to be checked
    found = [hit for page in pages() for hit in history_lines(page.read_text(), str(page.relative_to(ROOT)))]
    assert found == [], "history words (say it as the product is; history goes in commits):\n" + "\n".join(found)
