"""Throughput of the processor against its limits, on one broker, in one run.

    python benchmarks/throughput.py [--events N] [--naive-events M] [--batch B]

(a) Kafka pass-through: consume and re-produce the same bytes, same client settings, no decoding.
(b) The model alone on pre-built float32 arrays at the configured batch size.
(c) The processor (decode, batch, infer, encode, produce, commit after acks).
(d) A naive loop: one message at a time: poll, decode, predict, produce, wait for the ack, commit.
(e) The processor on a copy of the input where 1% of the rows make the model fail (bisection and
    dead letters at work); its ratio against (c) is the cost of poison rows.
(f) The processor with processing.guarantee exactly_once; its ratio against (c) is the cost of
    transactions.
(g) `streamer replay` of the whole input, against (a) and (b); it writes in Kafka transactions.
(p) The same replay with --at-least-once; g/p is the cost of a replay's transactions.
Then the processor again with `model.intra_op_threads` 0 (ONNX Runtime's own pool) and 2, against
the default 1; and a latency run: a paced producer at half of (c)'s rate, then at a tenth, for
5 s each, with the p50/p99 from event time (stamped when produced) to acknowledged prediction,
against the bound max_wait_ms + 2 batch times + 5 ms (a batch time = batch / (c)), and from event
time to the event read and to it scored (the transport's share apart from the processor's;
latency.py, with its pacer).
(h) The same job as an idiomatic faust-streaming agent (benchmarks/faust_peer.py); c/h.
(i) The processor on the same 32 features sent as 32 named float fields (model.inputs stacks
    them into the same model's input); i/c is the cost of named fields (columnar_fields.py).
(j) A mixed-type 12-field event (strings, a nullable float, a long, an enum, a boolean) into a
    scikit-learn ColumnTransformer model (models/build_converter_models.py, 5 inputs) with a label
    and a probability mapped out.
(n) (j)'s events as named-field JSON (input.format json): the JSON named-field path
    (formats/columnar/json_fields.py), (j)'s model and outputs.
(o) (j)'s events as protobuf-confluent (order.proto, written by Confluent's ProtobufSerializer;
    the test Schema Registry, tests/support/schema_registry.py, runs for it: Java 21 and the
    app in .cache/registry), (j)'s model and outputs.
(c), (j), (n) and (o) are broken down per event into decode, model, encode and loop, in us of CPU,
and (j), (n), (o) set against (a) and, on the non-model part, against (c) (stages.py says how).
`--figures a,c,i` runs only those (`--latency` adds the latency runs; they need c).
Each figure runs ``--repeat`` times (3), in a shuffled order each round (seeded by the round): the
median and the min are printed, ratios are of medians,
with the process CPU time per event of each (this process: the client, librdkafka's threads
included; the broker is another process; beside it the Python side's share, every thread but
librdkafka's), over the window its rate is measured on: from the first event to the last output
acknowledged by the broker for (a), (c), (e), (f), (i), (j), (n), (o) (start-up and shutdown left out; for
(f) the wait from there to its outputs committed, which a finite input ends with, is printed
apart: AckClock), the whole call for the others. ``--pin`` puts the broker (and the latency run's paced
producer) on one core and this process on another (``sched_setaffinity``, as ``taskset`` does), so
the two do not take each other's time and CPU figures compare across runs. Kafka rates run from the first consumed
message to the last ack, so group joins are not counted. The input's events, which this process
keeps, are frozen out of the garbage collector's way before each figure (streamer/heap.py), as every
processor freezes its own start-up heap: no figure pays full collections that walk them. ``--kafka
KEY=VALUE`` sets a librdkafka property for the clients of every figure, the pass-through's included
(a tuning compared on the same footing), but faust's (h) and the latency runs' pacer. A benchmark, not a test: the
figures are only comparable within one run on one machine.

The code: this entry point chooses the figures, runs the rounds and prints the table; harness.py
holds what every benchmark shares (pinning, a run's config, its CPU window and wake-ups, shuffled
rounds), figure_runs.py the runs of (a) to (g), domain_events.py the inputs of (i), (j), (n), (o),
stages.py the per-stage CPU, latency.py the latency runs and their pacer.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np

# This tree's streamer first, before a sibling imports it (an installed one would be taken instead).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from domain_events import json_inputs, mixed_inputs, named_inputs, protobuf_inputs  # noqa: E402
from figure_runs import (  # noqa: E402
    COMMIT_TAILS,
    model_only,
    naive,
    pass_through,
    poisoned_copy,
    processor_run,
    replay_run,
)
from harness import PINNED, fresh, rounds, timed  # noqa: E402
from latency import latency_runs, pace, print_latency  # noqa: E402
from stages import stage_report  # noqa: E402

from streamer import heap  # noqa: E402
from streamer.commands.demo import demo_config, encoded_events, produce_events, synthetic_events  # noqa: E402
from streamer.config import Config  # noqa: E402
from streamer.dev.broker import kafka_cluster  # noqa: E402
from streamer.formats.configured import input_codec  # noqa: E402
from streamer.kafka.topics import create_topics  # noqa: E402
from streamer.model.runner import model_runner  # noqa: E402

ALL = "abcdefghijnop"  # the figures a run without --figures makes
NAMES = {"a": "kafka pass-through", "b": "model alone", "c": "processor", "d": "naive loop",
         "e": "processor, 1% poison", "f": "processor, exactly-once", "g": "replay",
         "h": "faust-streaming agent", "i": "32 named float fields", "j": "mixed 12-field event",
         "n": "mixed event as JSON", "o": "mixed, protobuf-conf.", "p": "replay, at least once"}
RATIOS = [("c/a", "c", "a", 3), ("c/b", "c", "b", 3), ("c/d", "c", "d", 1), ("e/c", "e", "c", 3),
          ("f/c", "f", "c", 3), ("g/a", "g", "a", 3), ("g/b", "g", "b", 4), ("c/h", "c", "h", 1),
          ("i/c", "i", "c", 3), ("j/c", "j", "c", 3), ("n/c", "n", "c", 3), ("o/c", "o", "c", 3),
          ("g/c", "g", "c", 3), ("g/p", "g", "p", 3)]  # (name, numerator, denominator, digits)
Run = Callable[[Config], float]


@dataclass
class Measured:
    """Each figure's runs, in the order they ran: events/s, CPU us/event, the Python side's share of
    it (CpuWindow), and the producers' wake-ups per event (Wakeups)."""

    rates: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    python_cpu: dict[str, list[float]] = field(default_factory=dict)
    wakeups: dict[str, list[float]] = field(default_factory=dict)

    def add(self, tag: str, rate: float, us: float, python_us: float, woke: float) -> None:
        for into, value in zip((self.rates, self.cpu, self.python_cpu, self.wakeups), (rate, us, python_us, woke)):
            into.setdefault(tag, []).append(value)


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--naive-events", type=int, default=2_000,
                    help="the naive loop is slow: it scores this many (its rate is what counts)")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each figure: median and min are printed")
    ap.add_argument("--no-faust", action="store_true", help="leave out (h), the faust-streaming agent")
    ap.add_argument("--figures", help="comma-separated figures to run (default: all, a to j, n, o and p)")
    ap.add_argument("--pin", action="store_true", help="the broker on one core, this process on another")
    ap.add_argument("--latency", action="store_true", help="the latency runs with --figures too (needs c)")
    ap.add_argument("--kafka", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka property (repeatable), as under kafka:, for the clients of every "
                         "figure but faust's (h) and the latency runs' pacer")
    ap.add_argument("--pace", nargs=4, help=argparse.SUPPRESS)  # the latency run's producer process
    args = ap.parse_args()
    if bad := [kv for kv in args.kafka if "=" not in kv or not kv.split("=", 1)[0]]:
        ap.error(f"--kafka takes KEY=VALUE, got {bad}")
    return args


def figures_to_run(args: argparse.Namespace, wanted: set[str], base: Config, bootstrap: str,
                   events: list[dict[str, object]], scratch: Path,
                   stack: contextlib.ExitStack) -> dict[str, Run]:
    """The ``wanted`` figures, each a run on a fresh copy of ``base``; the inputs of (i), (j), (n) and
    (o) are produced here, each into a topic of its own (the test registry started for (o))."""
    n = args.events
    runs: dict[str, Run] = {
        "a": lambda c: pass_through(c, n),
        "b": lambda c: model_only(c, n),
        "c": lambda c: processor_run(c, n, tag="c"),
        "d": lambda c: naive(c, args.naive_events),
        "e": lambda c: processor_run(c, n, poisoned=len(events[::100])),
        "f": lambda c: processor_run(replace(c, processing=replace(
            c.processing, guarantee="exactly_once", transactional_id=f"bench-{c.input.group_id}")), n),
        "g": replay_run,
        "p": lambda c: replay_run(c, exactly_once=False),
    }
    if not args.no_faust and "h" in wanted:
        from faust_peer import run_faust  # benchmarks/: needs the bench extra (faust-streaming)

        runs["h"] = lambda c: run_faust(bootstrap, c.input.topics[0], c.output.topic, n)
    if "i" in wanted:
        named = named_inputs(base, bootstrap, events, scratch)
        runs["i"] = lambda c: processor_run(replace(named, input=replace(named.input, group_id=c.input.group_id),
                                                    output=c.output), n)
    domain: dict[str, Config] = {}  # (j), (n), (o): the mixed event as Avro, JSON, protobuf-confluent
    if wanted & set("jno"):
        domain["j"] = mixed_inputs(base, bootstrap, n, scratch)
    if "n" in wanted:
        domain["n"] = json_inputs(domain["j"], bootstrap, n)
    if "o" in wanted:
        from tests.support.schema_registry import schema_registry  # the test registry (Apicurio)

        registry = stack.enter_context(schema_registry())
        domain["o"] = protobuf_inputs(domain["j"], bootstrap, n, registry.url)
    for k, mixed in domain.items():
        runs[k] = partial(lambda c, m, k: processor_run(
            replace(m, input=replace(m.input, group_id=c.input.group_id), output=replace(c.output, schema=None)),
            n, tag=k), m=mixed, k=k)
    return {k: fn for k, fn in runs.items() if k in wanted}


def measure(args: argparse.Namespace, runs: dict[str, Run], base: Config, bootstrap: str,
            poisoned_topic: str) -> Measured:
    """``--repeat`` rounds of ``runs`` (harness.rounds), each on a fresh config; (d) in the first only."""
    measured = Measured()
    for round_, tag, fn in rounds(runs, args.repeat):
        if tag == "d" and round_:
            continue  # the naive loop is only the floor: once is enough
        cfg = fresh(base, tag)
        if tag == "e":
            cfg = replace(cfg, input=replace(cfg.input, topics=(poisoned_topic,)))
        create_topics(bootstrap, {cfg.output.topic: 3, f"{cfg.input.topics[0]}.dlq": 1})
        heap.freeze()
        measured.add(tag, *timed(lambda: fn(cfg), args.naive_events if tag == "d" else args.events))
    return measured


def intra_op(base: Config, bootstrap: str, n: int) -> dict[str, list[float]]:
    """(c) once again with ``model.intra_op_threads`` 0 (ONNX Runtime's own pool) and 2, as c0 and c2."""
    out = {}
    for threads in (0, 2):
        cfg = fresh(base, f"t{threads}")
        cfg = replace(cfg, model=replace(cfg.model, intra_op_threads=threads))
        create_topics(bootstrap, {cfg.output.topic: 3, f"{cfg.input.topics[0]}.dlq": 1})
        out[f"c{threads}"] = [processor_run(cfg, n)]
    return out


def print_figures(args: argparse.Namespace, base: Config, runs: dict[str, Run], m: Measured) -> None:
    """The table: each figure's median and min events/s and CPU/event, the ratios of medians,
    (f)'s tail to committed, CPU/event against (a), the Python side's share."""
    figures, cpu, python_cpu, wakeups = m.rates, m.cpu, m.python_cpu, m.wakeups
    med = {k: float(np.median(v)) for k, v in figures.items()}
    print(f"events {args.events} (naive {args.naive_events}), batch {args.batch}, "
          f"provider {model_runner(base).provider}, median and min of {args.repeat} runs "
          f"(the naive loop: one run), {PINNED}" + "".join(f", kafka {kv}" for kv in args.kafka))
    for k in sorted(runs):
        cpu_note = f"   {np.median(cpu[k]):6.1f} us CPU/event"
        if any(wakeups.get(k, ())):  # each run's CPU beside its producers' wake-ups (Wakeups)
            cpu_note += "   runs (us, Python us, wake-ups)/event " + " ".join(
                f"{u:.1f},{p:.1f},{w:.1f}" for u, p, w in zip(cpu[k], python_cpu[k], wakeups[k], strict=True))
        print(f"({k}) {NAMES[k]:<22} median {med[k]:>12,.0f}   min {min(figures[k]):>12,.0f} events/s{cpu_note}")
    if shown := [f"{name} {med[x] / med[y]:.{digits}f}" for name, x, y, digits in RATIOS if x in med and y in med]:
        print("   ".join(shown))
    if "exactly_once" in COMMIT_TAILS:  # outside (f)'s window (AckClock)
        tails = COMMIT_TAILS["exactly_once"]
        print(f"(f) from the last ack to its outputs committed: median {np.median(tails):.0f} ms "
              f"(runs {', '.join(f'{t:.0f}' for t in tails)}); the same rate to committed: "
              f"{np.median([args.events / (args.events / r + t / 1000) for r, t in zip(figures['f'], tails)]):,.0f} events/s")
    if "a" in cpu:  # the client's CPU per event against the pass-through's (target: c/a <= 1.5)
        base_us = float(np.median(cpu["a"]))
        print("CPU/event against (a): " + "   ".join(
            f"{k} {np.median(cpu[k]) / base_us:.2f}x" for k in sorted(cpu) if k not in "abd"))
        base_py = float(np.median(python_cpu["a"]))  # the Python side alone, librdkafka's threads left out
        print("Python-side CPU/event: " + "   ".join(
            f"{k} {np.median(python_cpu[k]):.1f} us" + (f" ({np.median(python_cpu[k]) / base_py:.2f}x)" if k != "a" else "")
            for k in sorted(python_cpu) if k not in "bd" and not np.isnan(np.median(python_cpu[k]))))


def main() -> None:
    args = arguments()
    if args.pace:
        pace(args.pace[0], args.pace[1], float(args.pace[2]), float(args.pace[3]))
        return
    if args.pin:
        PINNED.choose()
    wanted = set(args.figures.split(",")) if args.figures else set(ALL)
    with kafka_cluster() as bootstrap, tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        PINNED.client_side()
        base = demo_config(bootstrap, uuid.uuid4().hex[:6], args.batch)
        base = replace(base, kafka={**base.kafka, **dict(kv.split("=", 1) for kv in args.kafka)})
        create_topics(bootstrap, {base.input.topics[0]: 3})
        codec = input_codec(base.input)
        events = synthetic_events(args.events, 32)
        produce_events(bootstrap, base.input.topics[0], encoded_events(codec, events))
        runs = figures_to_run(args, wanted, base, bootstrap, events, Path(scratch), stack)
        poisoned_topic = f"{base.input.topics[0]}-poisoned"
        create_topics(bootstrap, {poisoned_topic: 3})
        produce_events(bootstrap, poisoned_topic, encoded_events(codec, poisoned_copy(events, 100)))
        # The input's 100,000 events stay in this process: frozen before each figure, as a processor
        # freezes its start-up heap (streamer/heap.py) and thaws it when it stops, so no figure pays
        # full collections walking them.
        heap.settle()
        measured = measure(args, runs, base, bootstrap, poisoned_topic)
        if args.figures is None:
            measured.rates.update(intra_op(base, bootstrap, args.events))
        peak = float(np.median(measured.rates["c"])) if "c" in measured.rates else 0.0
        latency, floor = latency_runs(base, bootstrap, peak) if args.figures is None or args.latency else ({}, {})
    print_figures(args, base, runs, measured)
    stage_report(measured.cpu)
    med = {k: float(np.median(v)) for k, v in measured.rates.items()}
    if "c0" in med:
        print(f"intra_op_threads 0: {med['c0']:,.0f} events/s ({med['c0'] / peak:.2f} of 1), "
              f"2: {med['c2']:,.0f} events/s ({med['c2'] / peak:.2f} of 1)")
    print_latency(latency, floor, base.batching.max_wait_ms, args.batch, peak)


if __name__ == "__main__":
    main()
