"""`make mutants`: plant each deliberate bug in a scratch copy and check that the suite kills it.

The bugs are listed in ``tests/mutants/catalog.py``: each has a name, what it breaks, the tests
that must kill it, and edits anchored by function and text (``tests/mutants/apply.py``).

For every mutant: copy the work tree (tracked and untracked, not ignored) to a scratch folder,
plant its edits there, and run its tests there with ``pytest -x`` against one shared broker
(started only when one of the selected tests is marked ``kafka``). A mutant is *killed* when a
named test fails (a hang counts too: the per-test timeout turns it into a failure). It
*survives* when they all pass, and the run fails; so does a mutant whose edits no longer apply.
Before any mutant, the same tests run once on the unmutated copy and must pass, so a kill means
the bug, not a broken test.

    python tests/mutants/run.py [--only NAME ...] [--no-baseline] [--keep]
    python tests/mutants/run.py --check [--only NAME ...]

``--check`` runs no test: it plants every selected mutant in memory against the work tree as it
stands and names each edit that no longer finds its function or its text exactly once, which is
what a refactor of the code under a mutant needs to know.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: tests.mutants and streamer come from this tree

from tests.mutants.apply import AnchorError, Mutant, apply_mutant, mutated_sources  # noqa: E402
from tests.mutants.catalog import MUTANTS  # noqa: E402

FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Outcome:
    mutant: str
    verdict: str  # killed | SURVIVED | ERROR
    killer: str
    seconds: float


def scratch_copy(dest: Path) -> None:
    """The work tree as git sees it (tracked and untracked, not ignored), without .git."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def run_tests(copy: Path, tests: tuple[str, ...], env: dict[str, str]) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    proc = subprocess.run(cmd, check=False, cwd=copy, env=env, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def check_imports_copy(copy: Path, env: dict[str, str]) -> None:
    """The child Python must import the mutated package, not the installed work tree."""
    out = subprocess.run([sys.executable, "-c", "import streamer; print(streamer.__file__)"],
                         cwd=copy, env=env, check=True, capture_output=True, text=True).stdout
    if not Path(out.strip()).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"the scratch copy imports {out.strip()}, not its own package")


def check(mutants: list[Mutant]) -> int:
    """Plant each mutant in memory against the work tree; 1 when any edit does not land."""
    failures = 0
    for mutant in mutants:
        try:
            files = mutated_sources(mutant, ROOT)
        except AnchorError as exc:
            failures += 1
            print(f"{mutant.name}: does not apply: {exc}")
        else:
            print(f"{mutant.name}: applies ({', '.join(sorted(files))})")
    print(f"\n{len(mutants) - failures} of {len(mutants)} mutants apply to the work tree")
    return 1 if failures else 0


def needs_broker(tests: tuple[str, ...]) -> bool:
    """Whether any of the tests is marked ``kafka``: a run of unit tests starts no broker."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "kafka", "-p", "no:cacheprovider",
           *tests]
    proc = subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 5):  # 5: nothing collected, so nothing needs the broker
        raise SystemExit(f"cannot collect {' '.join(tests)}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc.returncode == 0


def one(mutant: Mutant | None, tests: tuple[str, ...], env: dict[str, str], keep: bool) -> Outcome:
    name = mutant.name if mutant else "baseline (no mutant)"
    started = time.monotonic()
    copy = Path(tempfile.mkdtemp(prefix=f"mutant-{mutant.name if mutant else 'baseline'}-"))
    try:
        scratch_copy(copy)
        if mutant is not None:
            try:
                apply_mutant(mutant, copy)
            except AnchorError as exc:
                return Outcome(name, "ERROR", f"does not apply: {exc}", 0.0)
        env = {**env, "PYTHONPATH": str(copy)}
        check_imports_copy(copy, env)
        code, output = run_tests(copy, tests, env)
    finally:
        if not keep:
            shutil.rmtree(copy, ignore_errors=True)
    seconds = time.monotonic() - started
    failed = FAILED.findall(output)
    if mutant is None:
        verdict = "passed" if code == 0 else "ERROR"
        return Outcome(name, verdict, "" if code == 0 else output[-3000:], seconds)
    if code == 0:
        return Outcome(name, "SURVIVED", "", seconds)
    if code == 1 and failed:
        return Outcome(name, "killed", failed[0], seconds)
    return Outcome(name, "ERROR", f"pytest exit {code}:\n{output[-3000:]}", seconds)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="mutant names, or parts of them (01, revoke), to run")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copies")
    parser.add_argument("--check", action="store_true",
                        help="run no test: only check that every mutant applies to the work tree")
    args = parser.parse_args(argv)
    mutants = list(MUTANTS)
    if args.only:
        mutants = [m for m in mutants if m.name in args.only or any(o in m.name for o in args.only)]
    if not mutants:
        raise SystemExit("no mutant selected")
    if args.check:
        return check(mutants)
    from streamer.dev.broker import CACHE_DIR, kafka_cluster

    every = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
    outcomes: list[Outcome] = []
    with ExitStack() as stack:
        env = {**os.environ, "STREAMER_KAFKA_CACHE": str(CACHE_DIR)}
        if needs_broker(every):
            env["KAFKA_BOOTSTRAP"] = stack.enter_context(kafka_cluster())  # one broker for every run
        if not args.no_baseline:
            base = one(None, every, env, args.keep)
            print(f"{base.mutant}: {base.verdict} in {base.seconds:.0f} s", flush=True)
            if base.verdict != "passed":
                print(base.killer)
                return 1
        for mutant in mutants:
            outcome = one(mutant, mutant.tests, env, args.keep)
            outcomes.append(outcome)
            print(f"{outcome.mutant}: {outcome.verdict} {outcome.killer.splitlines()[0] if outcome.killer else ''}"
                  f" ({outcome.seconds:.0f} s)", flush=True)
            if outcome.verdict == "ERROR":
                print(outcome.killer)
    width = max(len(o.mutant) for o in outcomes)
    print(f"\n{'mutant':<{width}}  {'verdict':<8}  {'seconds':>7}  killing test")
    for o in outcomes:
        killer = o.killer.splitlines()[0] if o.killer else "-"
        print(f"{o.mutant:<{width}}  {o.verdict:<8}  {o.seconds:>7.0f}  {killer}")
    bad = [o for o in outcomes if o.verdict != "killed"]
    print(f"\n{len(outcomes) - len(bad)} of {len(outcomes)} mutants killed"
          + (f"; not killed: {', '.join(o.mutant for o in bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
