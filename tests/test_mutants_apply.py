"""Every deliberate bug of `make mutants` still lands in the code, once, inside its function; and the
applier touches only the function it is told to, and names the mutant when it cannot."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.mutants.apply import AnchorError, Edit, Mutant, apply_mutant, mutate, mutated_sources
from tests.mutants.catalog import MUTANTS

ROOT = Path(__file__).resolve().parent.parent


def test_there_are_mutants_with_unique_names_and_existing_killers() -> None:
    assert len(MUTANTS) >= 22
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    for mutant in MUTANTS:
        assert mutant.description and mutant.tests and mutant.edits, mutant.name
        for test in mutant.tests:
            assert (ROOT / test.split("::")[0]).is_file(), (mutant.name, test)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_mutant_applies_once_inside_its_function_and_still_compiles(mutant: Mutant) -> None:
    texts = mutated_sources(mutant, ROOT)  # AnchorError unless every edit matches exactly once
    for rel, text in texts.items():
        assert text != (ROOT / rel).read_text(), (mutant.name, rel)
        compile(text, rel, "exec")
    for test in mutant.tests:  # a killer that names a test function must name one that exists
        path, _, name = test.partition("::")
        name = name.split("[")[0]  # a parametrized test's case: its function is the name before [...]
        if name:
            assert re.search(rf"^\s*(async )?def {re.escape(name)}\(", (ROOT / path).read_text(), re.MULTILINE), test


SOURCE = '''\
def helper():
    total = 1
    return total


class Tracker:
    def commit(self):
        total = 1
        if total:
            total += 1
        return total

    class Inner:
        def commit(self):
            total = 1
            return total
'''


def edit(function: str, old: str | re.Pattern[str], new: str) -> Edit:
    return Edit("pkg/mod.py", function, old, new)


def test_a_pattern_is_replaced_inside_the_named_function_only() -> None:
    out = mutate(SOURCE, "99-demo", edit("Tracker.commit", "total = 1\n", "total = 2\n"))
    helper, tracker, inner = out.split("def ")[1:]
    assert "total = 1" in helper and "total = 1" in inner  # the same text elsewhere is left alone
    assert "        total = 2\n" in tracker and "total = 1" not in tracker


def test_a_nested_qualified_name_reaches_the_inner_method() -> None:
    out = mutate(SOURCE, "99-demo", edit("Tracker.Inner.commit", "return total", "return -total"))
    assert out.count("return -total") == 1 and out.index("return -total") > out.index("class Inner")


def test_matching_ignores_indentation_and_the_replacement_takes_the_code_s_own() -> None:
    anchored = edit("Tracker.commit", "if total:\n    total += 1\n", "total += 2\n")
    out = mutate(SOURCE, "99-demo", anchored)
    assert "        total = 1\n        total += 2\n        return total\n" in out
    nested = "class Outer:\n" + textwrap.indent(SOURCE, "    ")  # every line four spaces deeper
    moved = Edit(anchored.file, "Outer.Tracker.commit", anchored.old, anchored.new)
    assert "            total = 1\n            total += 2\n" in mutate(nested, "99-demo", moved)


def test_a_fragment_matches_inside_a_line_and_leaves_the_rest_of_it() -> None:
    out = mutate(SOURCE, "99-demo", edit("Tracker.commit", "total += 1", "total -= 1"))
    assert "            total -= 1\n" in out and out.count("total -= 1") == 1


def test_lines_are_compared_without_their_indentation() -> None:
    flattened = SOURCE.replace("            total += 1\n", "          total += 1\n")  # re-indented body
    anchored = edit("Tracker.commit", "if total:\n    total += 1\n", "total += 2\n")
    assert "        total = 1\n        total += 2\n" in mutate(flattened, "99-demo", anchored)


def test_a_regular_expression_is_searched_inside_the_function() -> None:
    out = mutate(SOURCE, "99-demo", edit("helper", re.compile(r"total = (\d)"), r"total = \1 + 1"))
    assert out.count("total = 1 + 1") == 1 and out.index("total = 1 + 1") < out.index("class Tracker")


@pytest.mark.parametrize(("anchored", "says"), [
    (edit("Tracker.flush", "total = 1\n", "total = 2\n"), "no such function"),
    (edit("helper", "total = 9\n", "total = 2\n"), "matches 0 times"),
    (edit("helper", "total", "count"), "matches 2 times"),
    (edit("helper", "return total\n", "return (\n"), "does not parse"),
], ids=["missing-function", "no-match", "several-matches", "broken-result"])
def test_an_edit_that_cannot_land_names_the_mutant_the_file_and_the_function(anchored: Edit, says: str) -> None:
    with pytest.raises(AnchorError, match=says) as caught:
        mutate(SOURCE, "99-demo", anchored)
    assert str(caught.value).startswith(f"mutant 99-demo: pkg/mod.py: {anchored.function}: ")


def test_a_mutant_is_written_only_when_all_its_edits_land(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(SOURCE)
    good = edit("helper", "total = 1\n", "total = 2\n")
    with pytest.raises(AnchorError, match="mutant 99-half: pkg/mod.py: Tracker.gone: no such function"):
        apply_mutant(Mutant("99-half", "half lands", ("t",), (good, edit("Tracker.gone", "x", "y"))), tmp_path)
    assert (tmp_path / "pkg" / "mod.py").read_text() == SOURCE
    assert apply_mutant(Mutant("99-whole", "lands", ("t",), (good,)), tmp_path) == ["pkg/mod.py"]
    assert (tmp_path / "pkg" / "mod.py").read_text() == SOURCE.replace("    total = 1\n", "    total = 2\n", 1)


def test_run_check_finds_every_mutant_applies_to_the_work_tree() -> None:
    done = subprocess.run([sys.executable, "tests/mutants/run.py", "--check"], cwd=ROOT, check=False,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(MUTANTS)} of {len(MUTANTS)} mutants apply" in done.stdout
