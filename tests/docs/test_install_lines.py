"""Install lines in the docs work where the reader is: every wheel-form extra line
(`pip install 'streamer[lake]'`) has the clone's form (`pip install -e '.[lake]'`) beside it, and
the training libraries the walk-through names are pinned as the dev extra pins them."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.docs.test_voice import ROOT, pages

WHEEL = re.compile(r"pip install '?streamer\[([a-z,]+)\]'?")
NEAR = 300  # characters: the clone's form is in the same sentence or table row


def lonely_wheel_lines(text: str, name: str) -> list[str]:
    """``name:line: extra`` for each wheel-form line whose paragraph has no clone form of that
    extra within NEAR characters."""
    found = []
    for m in WHEEL.finditer(text):
        start = text.rfind("\n\n", 0, m.start()) + 1
        end = text.find("\n\n", m.end())
        window = text[max(start, m.start() - NEAR):min(end if end >= 0 else len(text), m.end() + NEAR)]
        if f"pip install -e '.[{m.group(1)}]'" not in window:
            found.append(f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}")
    return found


@pytest.mark.parametrize(("text", "lonely"), [
    ("needs it: `pip install 'streamer[lake]'`.", True),
    ("`pip install 'streamer[lake]'`, or `pip install -e '.[lake]'` in a clone", False),
    ("`pip install 'streamer[lake]'`, or `pip install -e '.[eval]'` in a clone", True),
    ("`pip install 'streamer[lake]'`\n\nA new paragraph: `pip install -e '.[lake]'`", True),
    ("`pip install -e '.[lake]'` in a clone", False),
])
def test_the_check_finds_a_wheel_line_without_its_clone_form(text: str, lonely: bool) -> None:
    assert bool(lonely_wheel_lines(text, "x.md")) is lonely, text


def test_every_wheel_form_install_line_has_the_clone_form_beside_it() -> None:
    lonely = [hit for page in pages() for hit in lonely_wheel_lines(page.read_text(), str(page.relative_to(ROOT)))]
    assert not lonely, "add `pip install -e '.[EXTRA]'` (a clone's form) beside:\n" + "\n".join(lonely)


def test_the_training_libraries_are_pinned_as_the_dev_extra_pins_them() -> None:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    pins = {m.group(1): m.group(2) for m in (re.match(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^;\s]+)", d) for d in dev)
            if m is not None}
    page = (ROOT / "docs" / "bring_your_own_model.md").read_text()
    named = re.findall(r"pip install ((?:[A-Za-z0-9_.-]+==[^\s`]+ ?)+)", page)
    assert named, "docs/bring_your_own_model.md says what to install for its training libraries"
    for line in named:
        for name, version in (p.split("==") for p in line.split()):
            assert pins.get(name) == version, (name, version, pins.get(name))
    for library in ("scikit-learn", "skl2onnx"):  # what step 1 imports
        assert any(library + "==" in line for line in named), library
