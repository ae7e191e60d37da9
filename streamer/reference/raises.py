"""The messages streamer's own errors are built with, found in its source with ``ast``.

A message is shown as written: an f-string's parts as ``{...}``. A call to one of config_check.py's
helpers (``at_least(0, "model.timeout_ms", ...)``) is shown with the reason the helper builds, its
literal arguments put in.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
HELPERS = PACKAGE / "config_check.py"
BASE = "StreamerError"


@dataclass(frozen=True, slots=True)
class ErrorClass:
    """A subclass of StreamerError, wherever in streamer/ it is defined."""

    name: str
    base: str
    module: str  # its file, relative to the repository: streamer/errors.py
    doc: str


@dataclass(frozen=True, slots=True)
class Raised:
    """One place an error is built with a message a user can see."""

    error: str  # the class
    module: str
    line: int
    key: str  # ConfigError's dotted key ('' for other errors)
    message: str


def _files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "reference" not in p.relative_to(PACKAGE).parts)


def _module(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@cache
def error_classes() -> dict[str, ErrorClass]:
    """Every StreamerError subclass by name (StreamerError itself included)."""
    found: dict[str, ErrorClass] = {}
    defined = [(node, path) for path in _files() for node in ast.walk(_tree(path)) if isinstance(node, ast.ClassDef)]
    grew = True
    while grew:
        grew = False
        for node, path in defined:
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            base = next((b for b in bases if b in found or (b == "Exception" and node.name == BASE)), None)
            if node.name not in found and base is not None:
                found[node.name] = ErrorClass(node.name, base, _module(path), ast.get_docstring(node) or "")
                grew = True
    return found


def text(node: ast.expr | None, given: dict[str, str] | None = None) -> str | None:
    """A message as written: literal text, ``{...}`` for each computed part; None when not literal.

    ``given``: names whose values are known (a helper's literal arguments) and shown as they are.
    """
    given = given or {}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name):
                out.append(given.get(part.value.id, "{...}"))
            else:
                out.append("{...}")
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = text(node.left, given), text(node.right, given)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:  # redact(f"...")
        return text(node.args[0], given)
    return None


def _called(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


@cache
def helpers() -> dict[str, tuple[list[str], ast.expr]]:
    """config_check.py's functions that raise ConfigError(<a parameter>, reason): name -> (their
    parameters, the reason)."""
    out: dict[str, tuple[list[str], ast.expr]] = {}
    for fn in _tree(HELPERS).body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        params = [a.arg for a in fn.args.args]
        for node in ast.walk(fn):
            if (isinstance(node, ast.Call) and _called(node) == "ConfigError" and len(node.args) == 2
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in params):
                out[fn.name] = (params, node.args[1])
    return out


def _expanded(node: ast.Call) -> tuple[str, str] | None:
    """A helper call with a literal key: (key, the reason it builds)."""
    params, reason = helpers()[_called(node)]
    given = {p: str(a.value) for p, a in zip(params, node.args) if isinstance(a, ast.Constant)}
    shown = text(reason, given)
    return None if "key" not in given or shown is None else (given["key"], shown)


@cache
def raised() -> list[Raised]:
    """Every message an error of streamer's is built with, in file and line order."""
    classes = error_classes()
    out: list[Raised] = []
    expanded: set[str] = set()
    for path in _files():
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.Call):
                continue
            name = _called(node)
            if name in helpers() and path != HELPERS and isinstance(node.func, ast.Name):
                found = _expanded(node)
                if found is not None:
                    expanded.add(name)
                    out.append(Raised("ConfigError", _module(path), node.lineno, *found))
                continue
            if name not in classes or not node.args:
                continue
            if name == "ConfigError" and len(node.args) == 2:
                reason = text(node.args[1])
                if reason is not None:
                    out.append(Raised(name, _module(path), node.lineno, text(node.args[0]) or "{...}", reason))
            elif name == "Refused" and len(node.args) >= 2:  # Refused(status, reason): an online refusal
                if (reason := text(node.args[1])) is not None:
                    out.append(Raised(name, _module(path), node.lineno, "", reason))
            elif (message := text(node.args[0])) is not None:
                out.append(Raised(name, _module(path), node.lineno, "", message))
    in_helpers = [r for r in out if r.module == _module(HELPERS)]
    kept = [r for r in in_helpers if not any(
        fn.lineno <= r.line <= (fn.end_lineno or 0) for fn in _tree(HELPERS).body
        if isinstance(fn, ast.FunctionDef) and fn.name in expanded)]
    others = [r for r in out if r.module != _module(HELPERS)]
    return sorted(others + kept, key=lambda r: (r.module, r.line))
