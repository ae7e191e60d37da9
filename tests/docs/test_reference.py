"""The generated reference pages: every config key described, and the committed pages current."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamer.reference import config_page, errors_page
from streamer.reference.comments import describe
from streamer.reference.raises import raised

ROOT = Path(__file__).resolve().parent.parent.parent
PAGES = {"configuration.md": (config_page.page, config_page.COMMAND),
         "errors.md": (errors_page.page, errors_page.COMMAND)}


def test_every_config_key_has_a_description() -> None:
    keys = config_page.leaf_keys()
    assert {"kafka", "input.topics", "input.registry.url", "shadow.challengers[].path",
            "metrics.log_interval_ms"} <= keys.keys()
    undocumented = sorted(k for k, text in keys.items() if not text.strip())
    assert undocumented == [], f"config keys without a comment beside their field: {undocumented}"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_committed_page_is_the_generated_one(name: str) -> None:
    generate, command = PAGES[name]
    committed = (ROOT / "docs" / name).read_text()
    assert committed == generate(), f"docs/{name} is stale: run `{command}`"


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_pages_describe_the_product_as_it_is(name: str) -> None:
    text = PAGES[name][0]()
    assert not re.search(r"\bnow\b|\bused to\b|\bas before\b|\bissue \d+", text, re.IGNORECASE)


def test_the_command_writes_the_page() -> None:
    out = subprocess.run([sys.executable, "-m", "streamer.reference", "errors"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, check=True).stdout
    assert out == errors_page.page()
    bad = subprocess.run([sys.executable, "-m", "streamer.reference", "nothing"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "usage" in bad.stderr


def test_a_field_comment_is_the_block_above_then_the_trailing_one(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text("class A:\n"
                      "    # a block that\n"
                      "    # spans lines\n"
                      "    x: int = 1  # and a note\n"
                      "    y: int = 2  # a note that\n"
                      "    #             wraps\n"
                      "\n"
                      "    z: int = 3\n")
    assert describe(source, 4, 4) == "a block that spans lines And a note"
    assert describe(source, 4, 4, above_too=False) == "and a note"
    assert describe(source, 5, 5) == "a note that wraps"
    assert describe(source, 8, 8) == ""


def test_messages_are_shown_as_written_with_placeholders() -> None:
    found = {(r.error, r.key, r.message) for r in raised()}
    assert ("ConfigError", "input.topics", "needs at least one topic") in found
    # a config_check helper's reason, its literal arguments filled in
    assert ("ConfigError", "batching.max_wait_ms", "must be >= 0, got {...}") in found
    assert ("ConfigError", "input.schema", "no schema file at {...}") in found
    assert ("DeserializeError", "", "message is {...} bytes, over the {...}-byte limit") in found
    assert ("PoisonRowError", "", "the model fails on this row: {...}") in found


def test_each_error_class_gets_the_exit_code_the_cli_returns_for_it() -> None:
    page = errors_page.page()
    assert "| `ConfigError` | `StreamerError` | streamer/errors.py | 2 (EXIT_CONFIG) |" in page
    assert "| `BrokerError` | `StreamerError` | streamer/errors.py | 3 (EXIT_FATAL) |" in page
    assert "| `StopRequested` | `StreamerError` | streamer/errors.py | 0 |" in page
    assert "| `PoisonRowError` | `RecordError` | streamer/errors.py | none: a dead letter |" in page
