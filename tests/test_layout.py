"""The package's shape: every module named in the architecture page's map, small modules, no import cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "streamer"
MAX_LINES, MAX_LOOP_LINES = 400, 350


def modules() -> dict[str, Path]:
    """``streamer.kafka.offsets`` -> its file, for every module but package markers."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        found[".".join(path.relative_to(ROOT).with_suffix("").parts)] = path
    return found


def imports(path: Path) -> set[str]:
    """The streamer modules a file imports, at any depth (a function-level import counts too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("streamer"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)  # `from streamer.kafka import clients`
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("streamer"))
    return out


def test_the_module_map_names_every_module() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    table = page[page.index("\n## Module map\n"):].split("\n## ", 2)[1]  # up to the next section
    named = set(re.findall(r"^\| `(streamer/[\w/]+\.py)` \|", table, re.MULTILINE))
    files = {str(p.relative_to(ROOT)) for p in modules().values()}
    assert files - named == set(), "modules missing from the module map in docs/architecture.md"
    assert named - files == set(), "the module map in docs/architecture.md names modules that do not exist"


def test_no_module_is_too_long() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert sizes["streamer.processor"] < MAX_LOOP_LINES, sizes["streamer.processor"]
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}


def test_no_import_cycle() -> None:
    known = modules()
    graph = {name: {m for m in imports(path) if m in known and m != name} for name, path in known.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        for dep in sorted(graph[name]):
            visit(dep, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


@pytest.mark.parametrize("folder", ["pipeline", "formats", "model"])
def test_the_pipeline_formats_and_model_do_not_talk_to_kafka(folder: str) -> None:
    """Stages over a batch, the wire formats and the model contract import no Kafka client (the
    Schema Registry client is a codec's) and nothing of streamer/kafka/."""
    checked = [name for name in modules() if name.startswith(f"streamer.{folder}.")]
    assert checked, folder
    for name, path in modules().items():
        if not name.startswith(f"streamer.{folder}."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for module in names:
                kafka = module == "confluent_kafka" or (module.startswith("confluent_kafka.")
                                                        and not module.startswith("confluent_kafka.schema_registry"))
                assert not kafka and not module.startswith("streamer.kafka"), f"{name} imports {module}"
