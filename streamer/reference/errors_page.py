"""docs/errors.md from the source: the exit codes, the error classes and every message they carry."""

from __future__ import annotations

import ast
from itertools import groupby
from pathlib import Path

from streamer import errors
from streamer.reference.comments import block_above, described_names, plain
from streamer.reference.config_page import markdown
from streamer.reference.raises import BASE, PACKAGE, ErrorClass, Raised, error_classes, raised

COMMAND = "python -m streamer.reference errors > docs/errors.md"
CLI = PACKAGE / "cli.py"


def exit_codes() -> list[tuple[str, int, str]]:
    """errors.py's ``EXIT_*`` constants: name, value, the comment beside it."""
    notes = described_names(Path(errors.__file__), above_too=False)
    return [(name, getattr(errors, name), notes[name]) for name in notes if name.startswith("EXIT_")]


def _handled() -> dict[str, str]:
    """The exit code cli.py returns for each error class it catches: ``except X: ... return EXIT_Y``."""
    out: dict[str, str] = {}
    for handler in ast.walk(ast.parse(CLI.read_text())):
        if not isinstance(handler, ast.ExceptHandler) or not isinstance(handler.type, ast.Name):
            continue
        for node in handler.body:
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
                out.setdefault(handler.type.id, node.value.id)
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.Constant):
                out.setdefault(handler.type.id, str(node.value.value))
    return out


def exit_code(cls: ErrorClass) -> str:
    """The exit code of a command this error ends: the nearest class cli.py catches."""
    handled, classes = _handled(), error_classes()
    name = cls.name
    while name not in handled and name in classes and name != BASE:
        if name == "RecordError":  # the loop dead-letters the record and goes on
            return "none: a dead letter"
        if name == "OnlineError":  # the online server answers the request with its status
            return "none: an HTTP or gRPC status"
        name = classes[name].base
    code = handled.get(name, "EXIT_UNEXPECTED")
    return f"{getattr(errors, code)} ({code})" if code.startswith("EXIT_") else code


def _first_paragraph(doc: str) -> str:
    return markdown(plain(doc.split("\n\n")[0]))


def _rows(found: list[Raised], *, key: bool) -> list[str]:
    head = ["| key | reason |", "| --- | --- |"] if key else ["| message |", "| --- |"]
    seen: set[tuple[str, str]] = set()
    out = []
    for r in found:
        if (r.key, r.message) in seen:
            continue
        seen.add((r.key, r.message))
        cells = ([f"`{r.key}`"] if key else []) + [markdown(r.message).replace("|", "\\|")]
        out.append("| " + " | ".join(cells) + " |")
    return head + out


def _by_module(found: list[Raised], *, key: bool) -> list[str]:
    lines: list[str] = []
    for module, rows in groupby(sorted(found, key=lambda r: (r.module, r.line)), key=lambda r: r.module):
        lines += [f"### {module}", "", *_rows(list(rows), key=key), ""]
    return lines


def page() -> str:
    """The whole of docs/errors.md."""
    classes = error_classes()
    found = raised()
    intro = plain(" ".join(block_above(Path(errors.__file__), _line_of("EXIT_OK"))))
    stages = [c for c in classes.values() if c.base == "RecordError"]
    record_kinds = {c.name for c in stages}
    config_kinds = {"ConfigError"}
    lines = [
        "# Errors and exit codes",
        "",
        f"<!-- Generated from the source by `{COMMAND}`: edit the messages and comments there. -->",
        "",
        "## Exit codes",
        "",
        markdown(intro),
        "",
        "| code | name | meaning |",
        "| --- | --- | --- |",
        *[f"| {value} | `{name}` | {markdown(note)} |" for name, value, note in exit_codes()],
        "",
        "## Error classes",
        "",
        "Every error streamer raises on purpose is one of these. A command that one of them ends",
        "prints `streamer: MESSAGE` on standard error and exits with the code shown.",
        "",
        "| error | base | defined in | exit code | what it means |",
        "| --- | --- | --- | --- | --- |",
        *[f"| `{c.name}` | `{c.base}` | {c.module} | {exit_code(c)} | {_first_paragraph(c.doc)} |"
          for c in classes.values()],
        "",
        "## Configuration errors",
        "",
        "A config error reads `config key 'KEY': REASON`, `flag --FLAG: REASON` for a flag of the",
        "command line, or `file 'PATH': REASON` for a file. `{...}` stands for a value filled in when",
        "it happens (the value given, a file name, a limit); a key of `{...}` is the key being read.",
        "",
        *_by_module([r for r in found if r.error in config_kinds], key=True),
        "## Dead letters",
        "",
        "A record that cannot be processed goes to the dead-letter topic with its stage and reason in",
        "`streamer.dlq.*` headers (`streamer dlq inspect` lists them). The stages, in pipeline order:",
        "",
    ]
    for stage in errors.STAGES:
        (cls,) = [c for c in stages if getattr(errors, c.name).stage == stage]
        lines += [f"### {stage}", "", _first_paragraph(cls.doc), "",
                  *_rows([r for r in found if r.error == cls.name], key=False), ""]
    lines += ["## Other messages", ""]
    for name, cls in classes.items():
        rows = [r for r in found if r.error == name and name not in record_kinds | config_kinds]
        if rows:
            lines += [f"### {name}", "", *_rows(rows, key=False), ""]
    return "\n".join(lines)


def _line_of(name: str) -> int:
    for node in ast.parse(Path(errors.__file__).read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.lineno
    raise LookupError(name)
