"""The package's shape: every module named in the architecture page's map, small modules, no import cycle."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "streamer"
MAX_LINES, MAX_LOOP_LINES = 400, 350


@functools.cache
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


# ---- the layers ------------------------------------------------------------------------------

# The optional extras' libraries (pyproject.toml), never in the streaming image; and the dev broker's
# Docker clients (testcontainers), used only where a Docker engine answers.
# onnxruntime.quantization reads ONNX files with onnx and sympy: the optimize extra's.
EXTRAS = {"pyarrow", "pyiceberg", "sklearn", "matplotlib", "onnx", "sympy", "starlette", "uvicorn", "httptools",
          "grpc", "redis", "aiohttp", "pyspark", "ray", "testcontainers", "docker", "onnxruntime.quantization"}


CLI = ("streamer.cli", "streamer.cli_batch", "streamer.cli_jobs", "streamer.cli_parser")  # import each command's module when the command runs


def of_extra(module: str) -> bool:
    return any(module == e or module.startswith(e + ".") for e in EXTRAS)


def floors() -> dict[str, int]:
    """Each room's floor, 0 the ground, as the architecture page declares them (top floor first)."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = page[page.index("\n## Layers\n"):].split("```text\n", 1)[1].split("```", 1)[0]
    lines = [line.strip() for line in block.splitlines() if line.strip()]
    return {room.strip(): len(lines) - 1 - n for n, line in enumerate(lines) for room in line.split(",")}


def room(module: str) -> str:
    """``streamer.kafka.offsets`` -> ``kafka``; ``streamer.cli`` -> ``cli``; the package itself -> ``streamer``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] != "__init__" else "streamer"


@functools.cache
def packages() -> frozenset[str]:
    """Every streamer module and package by its dotted name."""
    return frozenset(modules()) | {f"streamer.{p.name}" for p in PACKAGE.iterdir() if p.is_dir()}


def imported_by(node: ast.AST) -> list[str]:
    """The streamer modules (or packages) one import statement names: ``from streamer import
    heap`` names ``streamer.heap``."""
    known = packages()
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "streamer":
        subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
        return subs or [node.module]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "streamer"]
    return []


def streamer_imports(path: Path, top_only: bool = False) -> list[tuple[str, ast.AST]]:
    """The streamer modules a file imports, each with its statement. ``top_only``: the module
    body's imports alone (not a function's, not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    return [(m, node) for node in (tree.body if top_only else ast.walk(tree)) for m in imported_by(node)]


def test_the_layers_are_declared_for_every_room() -> None:
    rooms = {room(".".join(p.relative_to(ROOT).with_suffix("").parts)) for p in PACKAGE.rglob("*.py")} - {"streamer"}
    rooms |= {"__main__"}  # streamer/__main__.py: python -m streamer
    declared = floors()
    assert rooms - set(declared) == set(), "rooms missing from the layers in docs/architecture.md"
    assert set(declared) - rooms == set(), "the layers in docs/architecture.md name rooms that do not exist"


def test_no_import_points_up_or_sideways() -> None:
    """A module imports its own room or the floors below; so nothing below commands/ imports a
    command, and nothing imports the CLI."""
    floor = floors()
    wrong = []
    for name, path in modules().items():
        here = room(name)
        for imported, node in streamer_imports(path):
            there = room(imported)
            if there not in (here, "streamer") and floor[there] >= floor[here]:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {imported} "
                             f"({there}, floor {floor[there]}; {here} is on floor {floor[here]})")
    assert wrong == []


def test_no_command_imports_another_command() -> None:
    """What two commands share lives in the wing it belongs to (kafka/, lake/, observe/, wiring/)."""
    wrong = [f"{path.relative_to(ROOT)} imports {imported}"
             for name, path in modules().items() if name.startswith("streamer.commands.")
             for imported, _ in streamer_imports(path)
             if imported.startswith("streamer.commands.") and imported != name]
    assert wrong == []


def third_party_at_top(name: str, seen: dict[str, set[str]]) -> set[str]:
    """The third-party packages importing ``name`` loads: its module body's, and those of the
    streamer modules it imports there, transitively."""
    if name in seen:
        return seen[name]
    seen[name] = set()
    path = modules().get(name) or PACKAGE / Path(*name.split(".")[1:]) / "__init__.py"
    if not path.exists():
        return seen[name]
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    for imported, _ in streamer_imports(path, top_only=True):
        found |= third_party_at_top(imported, seen)
    seen[name] = found - {"streamer"}
    return seen[name]


def test_function_level_imports_are_of_optional_extras_only() -> None:
    """Imports sit at the top of their files. A function imports only what an optional extra
    brings (the extra's library, or a streamer module that needs one); the command line (cli.py,
    cli_parser.py) imports each command's module when the command runs, so that `--help` and the
    light commands start at once and never load ONNX Runtime."""
    seen: dict[str, set[str]] = {}
    wrong = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body))
        guarded = {id(n) for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for n in ast.walk(node)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in top or id(node) in guarded:
                continue
            if name in CLI:  # what a command needs, when it runs
                continue
            targets = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                       else [a.name for a in node.names])
            for target in targets:
                if target.split(".")[0] == "streamer":
                    needs = {m for imported in imported_by(node) for m in third_party_at_top(imported, seen)}
                    ok = any(of_extra(m) for m in needs)
                else:
                    ok = of_extra(target)
                if not ok:
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target} inside a function")
    assert wrong == []
