"""Plants a mutant in a source tree: each edit is found inside a named function, never by line number.

An edit names a file, the qualified name of the function it lives in (``Processor._on_revoke``,
``dead_letter``, ``outer.inner`` for a nested function) and the text to replace there. Only that
function's lines are searched, so the same text elsewhere in the file is never touched, and the
edit still lands after the code around the function moves, grows or shrinks.

The old text is either

* a literal, matched line by line with each line stripped of its indentation, so a re-indented
  function keeps its mutant. The margin common to ``old`` and ``new`` is removed first; the
  replacement keeps ``new``'s relative indentation under the indentation of the first matched
  line. A one-line ``old`` without a newline is a fragment, matched anywhere inside a source line
  (``max_wait_ms, clock,``); a last line without a newline matches the start of a source line.
  For example, in::

      def add(self, rows):
          while at < n:
              if not self._pieces:
                  self._first_at = self._clock()

  ``Edit(file, "MicroBatcher.add", "if not self._pieces:\\n    self._first_at = self._clock()\\n",
  "self._first_at = self._clock()\\n")`` matches the two lines under the ``while`` and leaves the
  one line ``            self._first_at = self._clock()`` in their place.
* or a compiled regular expression, searched in the function's source as it stands (flags as
  compiled), replaced with ``match.expand(new)``.

Either way it must match exactly once inside the function, and the mutated file must still parse;
anything else raises :class:`AnchorError` naming the mutant, the file and the function.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True, slots=True)
class Edit:
    """One replacement inside one function: ``old`` (a literal or a compiled pattern) -> ``new``."""

    file: str  # relative to the tree's root, with forward slashes
    function: str  # qualified name: "Class.method", "function", "outer.inner"
    old: str | re.Pattern[str]
    new: str


@dataclass(frozen=True, slots=True)
class Mutant:
    """A deliberate bug: what it breaks, the tests that must fail under it, and its edits."""

    name: str  # "NN-what-it-does", the name `run.py --only` selects by
    description: str
    tests: tuple[str, ...]  # pytest node ids or files, relative to the tree's root
    edits: tuple[Edit, ...]


class AnchorError(Exception):
    """An edit's function is missing, or its old text does not match exactly once inside it."""

    def __init__(self, mutant: str, edit: Edit, problem: str) -> None:
        super().__init__(f"mutant {mutant}: {edit.file}: {edit.function}: {problem}")
        self.mutant = mutant
        self.edit = edit


@dataclass(frozen=True, slots=True)
class _Match:
    start: int  # offsets into the whole file's text
    end: int
    replacement: str


def definitions(tree: ast.Module) -> Iterator[tuple[str, Definition]]:
    """Every function and class with its dotted qualified name, outermost first."""
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, Definition]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, Definition):
                name = prefix + child.name
                yield name, child
                yield from walk(child, name + ".")
            else:  # a def under an if/try/with still belongs to the enclosing scope's name
                yield from walk(child, prefix)
    yield from walk(tree, "")


def function_span(source: str, qualname: str) -> tuple[int, int]:
    """The 1-based first and last line of the one definition named ``qualname``.

    Raises LookupError (with the closest names, when there are any) when there is not exactly one.
    """
    found: dict[str, list[Definition]] = {}
    for name, node in definitions(ast.parse(source)):
        found.setdefault(name, []).append(node)
    nodes = found.get(qualname, [])
    if not nodes:
        close = difflib.get_close_matches(qualname, list(found), n=3)
        raise LookupError("no such function" + (f" (closest: {', '.join(close)})" if close else ""))
    if len(nodes) > 1:  # a property's setter, or alternative definitions under an if
        raise LookupError(f"defined {len(nodes)} times, at lines {', '.join(str(n.lineno) for n in nodes)}")
    node = nodes[0]
    assert node.end_lineno is not None
    return node.lineno, node.end_lineno


def _lines(text: str) -> tuple[list[str], bool]:
    """The lines of ``text`` and whether it ends with a newline."""
    ends = text.endswith("\n")
    lines = text.split("\n")
    if ends:
        lines.pop()
    return lines, ends


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def _strip_margin(old: str, new: str) -> tuple[str, str]:
    """Remove the leading whitespace common to every non-blank line of both texts."""
    body = [line for line in (old + "\n" + new).split("\n") if line.strip()]
    margin = _indent(body[0]) if body else ""
    for line in body[1:]:
        while not line.startswith(margin):
            margin = margin[:-1]
    def cut(text: str) -> str:
        return "\n".join(line[len(margin):] if line.strip() else "" for line in text.split("\n"))
    return cut(old), cut(new)


def _literal_matches(source: str, first: int, last: int, old: str, new: str) -> list[_Match]:
    """Every place inside lines first..last (1-based) where the lines of ``old`` appear, stripped.

    The replacement keeps the relative indentation of ``new`` under the base found at the match:
    the first matched line's indentation less the first old line's own (``lead``).
    """
    old, new = _strip_margin(old, new)
    want, old_ends = _lines(old)
    put, new_ends = _lines(new) if new else ([], False)
    keys = [line.strip() for line in want]
    lead = len(_indent(want[0]))
    lines = source.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)

    def replacement(base: str, inline: bool) -> str:
        body = [("" if k == 0 and inline else base) + text if text.strip() else ""
                for k, text in enumerate(put)]
        return "\n".join(body) + ("\n" if new_ends else "")

    out: list[_Match] = []
    if len(want) == 1 and not old_ends:  # a fragment: anywhere inside one source line
        for i in range(first - 1, last):
            base = _indent(lines[i])[:max(0, len(_indent(lines[i])) - lead)]
            col = lines[i].find(keys[0])
            while col >= 0:
                out.append(_Match(offsets[i] + col, offsets[i] + col + len(keys[0]), replacement(base, True)))
                col = lines[i].find(keys[0], col + 1)
        return out
    for i in range(first - 1, last - len(want) + 1):
        fits = True
        for k, key in enumerate(keys):
            text = lines[i + k].strip()
            partial = k == len(keys) - 1 and not old_ends  # the last line, without its newline
            if not (text.startswith(key) if partial and key else text == key):
                fits = False
                break
        if not fits:
            continue
        indent = _indent(lines[i])
        base = indent[:max(0, len(indent) - lead)]
        j = i + len(want) - 1
        stop = offsets[j + 1] if old_ends else offsets[j] + len(_indent(lines[j])) + len(keys[-1])
        out.append(_Match(offsets[i], stop, replacement(base, False)))
    return out


def _pattern_matches(source: str, first: int, last: int, old: re.Pattern[str], new: str) -> list[_Match]:
    lines = source.split("\n")
    begin = sum(len(line) + 1 for line in lines[:first - 1])
    region = "\n".join(lines[first - 1:last])
    return [_Match(begin + m.start(), begin + m.end(), m.expand(new)) for m in old.finditer(region)]


def mutate(source: str, mutant: str, edit: Edit) -> str:
    """``source`` (the text of ``edit.file``) with the edit made; AnchorError if it cannot be."""
    try:
        first, last = function_span(source, edit.function)
    except (LookupError, SyntaxError) as exc:  # a file that does not parse has no function to find
        raise AnchorError(mutant, edit, str(exc)) from exc
    if isinstance(edit.old, re.Pattern):
        matches = _pattern_matches(source, first, last, edit.old, edit.new)
        shown = f"/{edit.old.pattern}/"
    else:
        if not edit.old.strip() or not edit.old.split("\n")[0].strip():
            raise AnchorError(mutant, edit, "the old text must start with a non-blank line")
        matches = _literal_matches(source, first, last, edit.old, edit.new)
        shown = repr(edit.old)
    if len(matches) != 1:
        where = f"lines {first}-{last}"
        raise AnchorError(mutant, edit, f"{shown} matches {len(matches)} times in the function ({where}), "
                                        "not exactly once")
    match = matches[0]
    result = source[:match.start] + match.replacement + source[match.end:]
    try:
        ast.parse(result)
    except SyntaxError as exc:
        raise AnchorError(mutant, edit, f"the mutated file does not parse: {exc}") from exc
    return result


def mutated_sources(mutant: Mutant, root: Path) -> dict[str, str]:
    """The new text of every file the mutant edits under ``root``, edits applied in order."""
    texts: dict[str, str] = {}
    for edit in mutant.edits:
        path = root / edit.file
        if edit.file not in texts:
            if not path.is_file():
                raise AnchorError(mutant.name, edit, "no such file")
            texts[edit.file] = path.read_text()
        texts[edit.file] = mutate(texts[edit.file], mutant.name, edit)
    return texts


def apply_mutant(mutant: Mutant, root: Path) -> list[str]:
    """Write the mutant into the tree at ``root`` (a scratch copy); returns the files it changed.

    Nothing is written unless every edit applies.
    """
    texts = mutated_sources(mutant, root)
    for rel, text in texts.items():
        (root / rel).write_text(text)
    return list(texts)
