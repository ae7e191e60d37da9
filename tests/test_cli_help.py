"""`streamer --help` speaks to users: every command and every flag says what it is for."""

from __future__ import annotations

import argparse

from streamer.cli_parser import DESCRIPTION, parser


def _parsers(p: argparse.ArgumentParser, path: str = "streamer") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, p)]
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _parsers(child, f"{path} {name}")
    return found


def test_the_top_help_describes_the_product_and_the_first_hour() -> None:
    text = parser().format_help()
    assert text.split("\n\n")[1].replace("\n", " ") == DESCRIPTION.replace("\n", " ")
    for command in ("topics create", "check", "produce", "run", "tail", "replay", "dlq inspect"):
        assert f"streamer {command} --config FILE" in text


def test_every_command_and_flag_has_help() -> None:
    bare = []
    for path, p in _parsers(parser()):
        if not p.description and path != "streamer":
            bare.append(path)
        for action in p._actions:
            if action.help is None and not isinstance(action, argparse._SubParsersAction):
                bare.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                helped = {c.dest for c in action._choices_actions if c.help}
                bare += [f"{path} {name}" for name in action.choices if name not in helped]
    assert bare == []
