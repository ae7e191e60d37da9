"""docs/evaluate.md, executed: the "Promote a model safely" walk-through runs as written, on a real broker.

Every fenced block whose info string carries a ``promote-<step>`` marker is taken from the page:
the two config blocks are saved as ``promote.yaml`` and ``encoder.yaml``, the shell and Python
blocks run verbatim, in order, in a folder laid out like the repository root (``models`` and
``streamer`` linked in, so the page's ``promote/`` and ``reports/`` are written there and never
into the repository), with the venv's ``streamer`` first on the PATH and the configs'
``${KAFKA_BOOTSTRAP}``, ``${INPUT_TOPIC}``, ``${OUTPUT_TOPIC}`` and ``${GROUP_ID}`` pointing at the
session broker and at topics no other test uses. The shadow topic the page names,
``decisions.shadow``, is this test's output topic's (one substitution, in the tail command).

``streamer run`` (``promote-run``) is started in the background, its log in a file; the test
awaits its conditions (the 2,000 predictions and some shadow ones written, the log's reload line,
the later predictions) with deadlines, never a sleep, and stops it with SIGTERM at the end.

The ``text`` blocks are excerpts of what the step before printed, compared line for line and in
order. Figures vary with the platform and a run id with the time, so both sides are masked before
they are compared (:func:`masked`): a run id ``eval-...`` reads ``eval-<id>`` and every number
that is not part of a name (``p99_abs_delta`` stays) reads ``#``; the words, the metric names, the conditions, ``ok``/``FAILED`` and the paths are
compared as printed. The shadow prediction is compared by its fields (the same keys, the
challenger's name and version) and the reload's log line with its numbers masked and its path
from ``promote/`` on (the page shows a checkout's absolute path). The exit codes (0, 5 and 0) and the report files
(report.html, report.json with ``auc_delta``) are checked too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.faults import STARTED, end_offsets, wait_until
from tests.support.pages import marked_blocks, run_block

pytestmark = pytest.mark.timeout(300)

DOC = ROOT / "docs" / "evaluate.md"
BIN = Path(sys.executable).parent  # the venv's bin: python and the streamer script
STEPS = {"promote-models": "sh", "promote-config": "yaml", "promote-events": "python", "promote-produce": "sh",
         "promote-run": "sh", "promote-shadow": "sh", "promote-shadow-output": "text",
         "promote-evaluate": "sh", "promote-evaluate-output": "text", "promote-gate": "sh",
         "promote-gate-output": "text", "promote-optimize": "sh", "promote-encoder-config": "yaml",
         "promote-optimize-evaluate": "sh", "promote-optimize-output": "text", "promote-reload": "sh",
         "promote-reload-log": "text", "promote-later": "sh", "promote-check": "python",
         "promote-check-output": "text"}
_RUN_ID = re.compile(r"\beval-[A-Za-z0-9_.-]+?(?=[:\s]|$)")
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def doc_blocks() -> dict[str, str]:
    return marked_blocks(DOC, "promote", STEPS, ordered=True)


def masked(line: str) -> str:
    """``line`` with its run id and its numbers masked (see the module docstring).

    >>> masked("evaluate eval-20261204T120102-3f2a: 2,000 events, agreement 0.98 passes agreement >= 0.95")
    'evaluate eval-<id>: # events, agreement # passes agreement >= #'
    """
    return _NUMBER.sub("#", _RUN_ID.sub("eval-<id>", line.rstrip()))


def assert_printed(excerpt: str, printed: str) -> None:
    """Each line of the excerpt is a whole line of ``printed``, in the order shown, numbers masked."""
    lines = iter(masked(line) for line in printed.splitlines())
    for line in excerpt.splitlines():
        if line.strip():
            assert any(have == masked(line) for have in lines), f"{line!r} is not printed (in this order):\n{printed}"


def written(bootstrap: str, topic: str) -> int:
    return sum(end_offsets(bootstrap, topic).values())


def test_the_page_names_each_flag_its_commands_use() -> None:
    blocks = doc_blocks()
    assert blocks["promote-run"].strip() == "streamer run --config promote.yaml"
    assert "--topic decisions.shadow" in blocks["promote-shadow"]
    assert "--bootstrap 50" in blocks["promote-evaluate"] and "--labels label" in blocks["promote-evaluate"]
    assert blocks["promote-gate"].rstrip().endswith('|| echo "exit code $?"')
    assert masked("ok     p99_abs_delta = 0.03127 passes p99_abs_delta <= 0.05") == \
        "ok     p99_abs_delta = # passes p99_abs_delta <= #"


@pytest.mark.kafka
def test_the_promote_page_runs_as_written(bootstrap: str, tmp_path: Path) -> None:
    blocks = doc_blocks()
    assert (BIN / "streamer").exists(), f"no streamer script beside {sys.executable}"
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("models", "streamer"):
        (root / name).symlink_to(ROOT / name)
    run = uuid.uuid4().hex[:8]
    source, output = f"transactions-{run}", f"decisions-{run}"
    env = {**os.environ, "KAFKA_BOOTSTRAP": bootstrap, "INPUT_TOPIC": source, "OUTPUT_TOPIC": output,
           "GROUP_ID": f"group-{run}", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONUNBUFFERED": "1"}

    run_block("sh", blocks["promote-models"], root, env, timeout_s=120)
    assert (root / "promote" / "serving.onnx").read_bytes() == (root / "promote" / "champion.onnx").read_bytes()
    (root / "promote.yaml").write_text(blocks["promote-config"])
    run_block("python", blocks["promote-events"], root, env)
    assert len((root / "events.jsonl").read_text().splitlines()) == 2000
    created = run_block("sh", blocks["promote-produce"], root, env)
    assert f"created  {source} (input.topics[0])" in created
    assert f"created  {output}.shadow (shadow.topic)" in created
    assert f"produced 2000 events to {source}" in created.replace(",", "")

    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(shlex.split(blocks["promote-run"]), cwd=root, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    tail = lambda: "\n".join(log.read_text(errors="replace").splitlines()[-30:])  # noqa: E731
    try:
        wait_until(lambda: written(bootstrap, output) >= 2000 and written(bootstrap, f"{output}.shadow") > 0,
                   120, "the champion's 2,000 predictions and the first shadow ones", tail)
        shown = run_block("sh", blocks["promote-shadow"].replace("decisions.shadow", f"{output}.shadow"), root, env)
        got, want = json.loads(shown.splitlines()[0]), json.loads(blocks["promote-shadow-output"])
        assert sorted(got) == sorted(want), (got, want)
        assert (got["model_name"], got["model_version"]) == ("fraud_lr_retrained", "2")

        printed = run_block("sh", blocks["promote-evaluate"], root, env, timeout_s=120)  # rc 0: run_block checks
        assert_printed(blocks["promote-evaluate-output"], printed)
        assert (root / "reports" / "retrained" / "report.html").is_file()
        metrics = json.loads((root / "reports" / "retrained" / "report.json").read_text())["metrics"]
        assert metrics["events"] == 2000 and "auc_delta" in metrics, sorted(metrics)

        printed = run_block("sh", blocks["promote-gate"], root, env, timeout_s=120)
        assert_printed(blocks["promote-gate-output"], printed)
        assert printed.rstrip().endswith("exit code 5"), printed

        run_block("sh", blocks["promote-optimize"], root, env, timeout_s=120)
        (root / "encoder.yaml").write_text(blocks["promote-encoder-config"])
        printed = run_block("sh", blocks["promote-optimize-evaluate"], root, env, timeout_s=180)
        assert_printed(blocks["promote-optimize-output"], printed)

        run_block("sh", blocks["promote-reload"], root, env)
        relative = re.compile(r"from \S*?(promote/serving\.onnx)")
        want_log = masked(relative.sub(r"from \1", blocks["promote-reload-log"].strip()))

        def reloaded() -> bool:
            return any(masked(relative.sub(r"from \1", line)) == want_log
                       for line in log.read_text(errors="replace").splitlines())

        wait_until(reloaded, 60, f"the log line {want_log!r}", tail)
        run_block("sh", blocks["promote-later"], root, env)
        check: list[str] = []

        def later_scored() -> bool:
            check[:] = [run_block("python", blocks["promote-check"], root, env)]
            return check[0].strip() == blocks["promote-check-output"].strip()

        wait_until(later_scored, 90, "the 200 later predictions, each from the retrained file",
                   lambda: "".join(check) + "\n" + tail())
    finally:
        if proc.poll() is None:
            wait_until(lambda: STARTED in log.read_text(errors="replace") or proc.poll() is not None, 60,
                       "the processor's signal handlers", tail)
            proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    assert rc == 0, tail()
