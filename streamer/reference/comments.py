"""The comment a source file attaches to each field or constant, read with ``ast`` and ``tokenize``.

A name's description is the block of comment lines right above it followed by its trailing
``# ...`` comment. A comment line whose text starts with two or more spaces after the ``#`` goes on
the trailing comment of the line above it (errors.py's ``EXIT_FATAL`` wraps its comment that way).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

_CONTINUED = re.compile(r"#\s{2,}\S")
_RST = re.compile(r"``([^`]+)``")


def plain(text: str) -> str:
    """A docstring's or comment's reStructuredText literals as Markdown code: ``x`` -> `x`."""
    return _RST.sub(r"`\1`", re.sub(r":(?:class|func|data|meth):`~?([^`]+)`", r"`\1`", text))


@cache
def _comments(path: Path) -> tuple[dict[int, str], dict[int, str]]:
    """Per line: the comment that is the whole line, and the comment that trails code."""
    alone: dict[int, str] = {}
    trailing: dict[int, str] = {}
    lines = path.read_text().splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type != tokenize.COMMENT:
            continue
        row, col = tok.start
        (alone if not lines[row - 1][:col].strip() else trailing)[row] = tok.string
    return alone, trailing


def _text(comment: str) -> str:
    return comment.lstrip("#").strip()


def describe(path: Path, start: int, end: int, above_too: bool = True) -> str:
    """The description of the statement on lines ``start`` to ``end`` (1-based) of ``path``;
    ``above_too=False``: its trailing comment alone (the block above introduces a group)."""
    alone, trailing = _comments(path)
    above = block_above(path, start) if above_too else []
    after = [_text(trailing[n]) for n in range(start, end + 1) if n in trailing]
    line = end + 1
    while line in alone and _CONTINUED.match(alone[line]) and after:
        after.append(_text(alone[line]))
        line += 1
    text = " ".join(after)
    if above:  # the trailing comment reads as a sentence after the block
        text = " ".join(above) + (" " + text[:1].upper() + text[1:] if text else "")
    return plain(text.strip())


def block_above(path: Path, start: int) -> list[str]:
    """The comment lines right above line ``start`` of ``path``, top first."""
    alone, _ = _comments(path)
    above: list[str] = []
    line = start - 1
    while line in alone and not _CONTINUED.match(alone[line]):
        above.insert(0, _text(alone[line]))
        line -= 1
    return above


def described_names(path: Path, scope: str | None = None, above_too: bool = True) -> dict[str, str]:
    """Each name assigned in class ``scope`` of ``path`` (module level when None) -> its description."""
    tree = ast.parse(path.read_text())
    body: list[ast.stmt] = tree.body
    if scope is not None:
        (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == scope]
        body = cls.body
    out: dict[str, str] = {}
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = describe(path, node.lineno, node.end_lineno or node.lineno, above_too)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = describe(path, node.lineno, node.end_lineno or node.lineno, above_too)
    return out
